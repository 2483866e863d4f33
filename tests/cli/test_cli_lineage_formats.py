"""`planfence memory lineage --format tree|json|dot|mermaid` and the plan graph behind it.

A plan used two versions; one owner moved on since, and the plan was replanned once. Every
format must say which version was used, that it is stale, and what the plan superseded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.adapters.cli.main import main
from planfence.plugins.gate.graph import load_plan_graph, plan_graph
from planfence.shared_memory import Record, open_store
from planfence.shared_memory.lineage import frontier_sync
from planfence.shared_memory.records import KIND_PLAN


@dataclass
class Story:
    url: str
    old_plan: str
    plan: str
    dest_used: str
    dest_now: str
    date: str


@pytest.fixture
def story(sqlite_url: str) -> Story:
    with open_store(sqlite_url) as s:
        s.own("trip/dest", "alice")
        s.own("trip/date", "bob")
        d1 = s.put("trip/dest", "Lisbon", author="alice")
        t1 = s.put("trip/date", "May", author="bob")
        p1 = s.add("plan/carol", "Lisbon", author="carol", parents=[d1.id, t1.id], kind=KIND_PLAN)
        d2 = s.put("trip/dest", "Porto", author="alice", parents=[d1.id])
        p2 = s.add(
            "plan/carol",
            "Porto",
            author="carol",
            parents=[d2.id, t1.id],
            kind=KIND_PLAN,
            supersedes=p1.id,
        )
        d3 = s.put("trip/dest", 'Faro "quoted" <b>', author="alice", parents=[d2.id])
    return Story(sqlite_url, p1.id, p2.id, d2.id, d3.id, t1.id)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_tree_marks_the_stale_version_and_the_supersedes_chain(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, err = run(capsys, "memory", "lineage", story.plan[:10], "--store", story.url)
    assert code == 0, err
    lines = out.splitlines()
    assert any(story.dest_used[:12] in ln and "[used, STALE]" in ln for ln in lines), out
    assert any(story.date[:12] in ln and "[used, current]" in ln for ln in lines), out
    assert f"stale: trip/dest used {story.dest_used[:12]}, current {story.dest_now[:12]}" in lines
    assert f"supersedes: {story.plan[:12]} -> {story.old_plan[:12]}" in lines


def test_json_has_the_graph_the_ui_serves(capsys: pytest.CaptureFixture[str], story: Story) -> None:
    code, out, _ = run(capsys, "memory", "lineage", story.plan, "--store", story.url, "--json")
    assert code == 0
    graph = json.loads(out)["graph"]
    assert graph["plan"] == story.plan
    assert graph["supersedes"] == [story.old_plan]
    assert graph["stale"] == [
        {"key": "trip/dest", "used": story.dest_used, "current": story.dest_now}
    ]
    ids = [n["id"] for n in graph["nodes"]]
    assert len(ids) == len(set(ids))
    assert all(p in ids and c in ids for p, c in graph["edges"])
    same = run(capsys, "memory", "lineage", story.plan, "--store", story.url, "--format", "json")
    assert json.loads(same[1]) == json.loads(out)


def test_dot_marks_used_versions_and_the_chain(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, out, _ = run(
        capsys, "memory", "lineage", story.plan, "--store", story.url, "--format", "dot"
    )
    assert code == 0
    assert out.startswith("digraph lineage {") and out.rstrip().endswith("}")
    used = next(ln for ln in out.splitlines() if ln.startswith(f'  "{story.dest_used}" ['))
    assert "color=red" in used and "style=bold" in used
    assert f'"{story.old_plan}" -> "{story.plan}" [style=dashed' in out
    assert out.count("{") == out.count("}")


def test_mermaid_marks_stale_and_current(capsys: pytest.CaptureFixture[str], story: Story) -> None:
    code, out, _ = run(
        capsys, "memory", "lineage", story.plan, "--store", story.url, "--format", "mermaid"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "flowchart BT"
    node_of = {ln.split("[", 1)[0].strip(): ln for ln in lines if '["' in ln}
    stale = [ln.split()[1] for ln in lines if ln.strip().endswith(" stale;")]
    assert len(stale) == 1 and story.dest_used[:12] in node_of[stale[0]]
    assert any("superseded by" in ln for ln in lines)
    assert all('"' not in ln.split('["', 1)[1][:-2] for ln in lines if '["' in ln)


def test_json_flag_and_another_format_disagree(
    capsys: pytest.CaptureFixture[str], story: Story
) -> None:
    code, _, err = run(
        capsys, "memory", "lineage", story.plan, "--store", story.url, "--json", "--format", "dot"
    )
    assert code == 2
    assert err.startswith("planfence: error: ") and "--format dot" in err


# ---- the pure graph against the reference walk ---------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[Record], dict[str, str | None]]:
    n = draw(st.integers(2, 14))
    keys = [f"k/{i}" for i in range(draw(st.integers(1, 4)))]
    records: list[Record] = []
    for i in range(n):
        parents = (
            draw(st.sets(st.sampled_from([r.id for r in records]), max_size=3))
            if records
            else set()
        )
        key = "plan/p" if i == n - 1 else draw(st.sampled_from(keys))
        kind = KIND_PLAN if i == n - 1 else "fact"
        records.append(Record.create(key, i, author="a", parents=sorted(parents), kind=kind))
    heads: dict[str, str | None] = {
        k: draw(st.sampled_from([None, *[r.id for r in records if r.key == k]])) for k in keys
    }
    return records, heads


@settings(max_examples=150, deadline=None)
@given(dags())
def test_graph_used_versions_are_the_frontier_over_every_fact_key(
    dag: tuple[list[Record], dict[str, str | None]],
) -> None:
    records, heads = dag
    by_id = {r.id: r for r in records}
    root = records[-1].id
    lookup = lambda ids: {i: by_id[i] for i in ids if i in by_id}  # noqa: E731
    lineage = frontier_sync(lookup, [root], ())
    graph = plan_graph(root, lineage, heads)
    fact_keys = {r.key for r in lineage.records.values() if r.kind != KIND_PLAN}
    reference = frontier_sync(lookup, [root], fact_keys)
    assert {(u.key, u.used) for u in graph.used} == {
        (k, v) for k, vs in reference.versions.items() for v in vs
    }
    assert {n.id for n in graph.nodes} == set(lineage.records)  # every ancestor, once
    assert len(graph.nodes) == len(lineage.records)
    for u in graph.used:
        assert u.stale == (heads.get(u.key) is not None and heads[u.key] != u.used)
        node = graph.node(u.used)
        assert node is not None and node.used and node.current == (heads.get(u.key) == u.used)


def test_loader_reads_the_chain_and_heads(story: Story) -> None:
    with open_store(story.url) as s:
        graph = load_plan_graph(s, story.plan)
    assert graph.supersedes == (story.old_plan,)
    assert [(u.key, u.stale) for u in graph.used] == [("trip/date", False), ("trip/dest", True)]
    assert graph.complete and not graph.problems

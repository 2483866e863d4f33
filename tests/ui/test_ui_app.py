"""`planfence ui` over HTTP: the JSON API, escaping, id prefixes and the host check."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from ui_world import (
    MEMORY,
    NOTES,
    REFUSALS,
    Busy,
    World,
    busy,
    stale_then_replan,
    two_versions_used,
)

from planfence.adapters.ui import create_app
from planfence.shared_memory import Store, open_store


@pytest.fixture
def world_store(sqlite_url: str) -> Iterator[tuple[Store, World]]:
    with open_store(sqlite_url) as store:
        yield store, stale_then_replan(store)


@pytest.fixture
def client(world_store: tuple[Store, World]) -> TestClient:
    return TestClient(create_app(world_store[0]), base_url="http://127.0.0.1")


def test_api_plan_has_the_documented_shape(
    client: TestClient, world_store: tuple[Store, World]
) -> None:
    w = world_store[1]
    data = client.get(f"/api/plans/{w.old_plan[:10]}").json()  # a unique prefix is enough
    assert data["plan"] == w.old_plan
    assert data["supersedes"] == []
    assert data["stale"] == [{"key": "order/7", "used": w.order_used, "current": w.order_now}]
    nodes = {n["id"]: n for n in data["nodes"]}
    assert nodes[w.order_used]["current"] is False and nodes[w.address]["current"] is True
    assert {tuple(e) for e in data["edges"]} == {
        (w.order_used, w.old_plan),
        (w.address, w.old_plan),
    }
    assert [d["verdict"] for d in data["decisions"]] == ["replan"]
    newer = client.get(f"/api/plans/{w.plan}").json()
    assert newer["supersedes"] == [w.old_plan] and newer["stale"] == []
    assert [d["verdict"] for d in newer["decisions"]] == ["allow"]


def test_api_decisions_filter(client: TestClient, world_store: tuple[Store, World]) -> None:
    w = world_store[1]
    every = client.get("/api/decisions").json()
    assert [d["verdict"] for d in every] == ["allow", "replan"]
    assert [d["plan"] for d in client.get("/api/decisions?verdict=replan").json()] == [w.old_plan]
    assert client.get(f"/api/decisions?plan={w.plan[:12]}").json()[0]["plan"] == w.plan
    assert client.get("/api/decisions?tool=nothing").json() == []
    assert client.get("/api/decisions?agent=shipper&limit=1").json()[0]["verdict"] == "allow"


def test_unknown_and_malformed_references_are_clear_errors(client: TestClient) -> None:
    assert client.get("/api/plans/" + "ab" * 32).status_code == 404
    bad = client.get("/api/plans/xyz")
    assert bad.status_code == 404 and "error" in bad.json()
    assert client.get("/plans/deadbeefdeadbeef").status_code == 404
    assert client.get("/keys/no/such/key").status_code == 404
    assert client.get("/api/decisions?plan=nothex").status_code == 404


def test_pages_escape_store_values(client: TestClient, world_store: tuple[Store, World]) -> None:
    store, _ = world_store
    store.own("notes/x", "mallory")
    store.put("notes/x", "<script>alert(1)</script>", author="mallory")
    page = client.get("/keys/notes/x")
    assert page.status_code == 200
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    addr = client.get("/keys/address/ana").text
    assert "&lt;b&gt;&amp;" in addr and "<b>&" not in addr
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_plan_page_marks_the_stale_version_and_links_keys(
    client: TestClient, world_store: tuple[Store, World]
) -> None:
    w = world_store[1]
    page = client.get(f"/plans/{w.old_plan}").text
    assert page.count('class="node used stale"') == 1
    assert f'data-id="{w.order_used}"><g class="node used stale"' in page
    assert 'href="/keys/order/7"' in page
    key = client.get("/keys/order/7").text
    assert w.order_now[:12] in key and w.order_used[:12] in key
    assert key.index(w.order_now[:12]) < key.index(w.order_used[:12])  # newest first


def test_each_stale_version_shows_its_own_value(world_store: tuple[Store, World]) -> None:
    store = world_store[0]
    found = two_versions_used(store)
    client = TestClient(create_app(store), base_url="http://127.0.0.1")
    api = client.get(f"/api/plans/{found.plan}").json()
    assert sorted((v["used"], v["used_value"]) for v in api["stale_values"]) == sorted(
        [(found.revs[2], {"rev": 3}), (found.revs[3], {"rev": 4})]
    )
    page = client.get(f"/plans/{found.plan}").text
    table = page[page.index("<table class=stale-values>") : page.index("</table>")]
    rows = table.split("<tr>")[2:]
    assert len(rows) == 2
    for n, rid in ((3, found.revs[2]), (4, found.revs[3])):
        [row] = [r for r in rows if rid[:12] in r]
        assert f"<div class=del>  &quot;rev&quot;: {n}</div>" in row, row
        assert "<div class=ins>  &quot;rev&quot;: 5</div>" in row, row


def test_every_link_of_a_plan_page_leads_to_a_page(world_store: tuple[Store, World]) -> None:
    store, w = world_store
    found = two_versions_used(store)
    client = TestClient(create_app(store), base_url="http://127.0.0.1")
    for plan in (w.plan, w.old_plan, found.plan):
        page = client.get(f"/plans/{plan}").text
        links = set(re.findall(r'href="([^"]+)"', page))
        assert f"/plans/{plan}" in links  # the plan's own box in the lineage
        for link in links:
            assert client.get(link.replace("&amp;", "&")).status_code == 200, link
    page = client.get(f"/plans/{found.plan}").text
    assert f'<a href="/plans/{found.earlier}"' in page  # the plan it was derived from


def test_requests_for_other_hosts_are_refused(world_store: tuple[Store, World]) -> None:
    # DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not read the store.
    app = create_app(world_store[0])
    assert TestClient(app, base_url="http://evil.example").get("/api/decisions").status_code == 400
    assert (
        TestClient(app, base_url="http://localhost:8765").get("/api/decisions").status_code == 200
    )


def test_a_janus_key_page_lists_each_candidate_with_its_verdict_and_scores(
    sqlite_url: str,
) -> None:
    import asyncio

    from planfence.plugins.janus import (
        FunctionEvaluator,
        JanusConfig,
        JanusController,
        JanusStoreHook,
        Task,
    )
    from planfence.shared_memory import open_async_store

    config = JanusConfig(support_size=2, coverage_size=1, fresh_size=2, trigger="always", seed=5)
    tasks = [Task(id=f"t{i}", question=f"fact {i % 3}?", answer=f"fact{i % 3}") for i in range(4)]

    async def curate() -> None:
        store = await open_async_store(sqlite_url)
        judge = FunctionEvaluator(lambda memory, task: str(task.answer) in str(memory))
        hook = await JanusStoreHook(
            store, "team/notes", JanusController(judge, config=config), owner="janus"
        ).open()
        memories = ["fact0", "fact0 fact1", "fact1", "fact0 fact1 fact2"]
        for memory, task in zip(memories, tasks, strict=True):
            await hook.submit(memory, task, author="curator")
        await store.aclose()

    asyncio.run(curate())
    with open_store(sqlite_url) as store:
        client = TestClient(create_app(store), base_url="http://127.0.0.1")
        data = client.get("/api/keys/team/notes").json()
        page = client.get("/keys/team/notes").text
    verdicts = [d["verdict"] for d in data["janus"]]
    assert len(verdicts) == 4 and "keep" in verdicts and "deploy" in verdicts
    compared = [d for d in data["janus"] if d["payload"]["compared"]]
    assert compared and all(d["payload"]["scores"]["old"] is not None for d in compared)
    assert data["owner"] == "janus" and len(data["history"]) >= 2
    assert "Janus candidates" in page and page.count('class="verdict-keep"') >= 1


@pytest.fixture
def busy_client(sqlite_url: str) -> Iterator[tuple[TestClient, Busy]]:
    found = busy(sqlite_url)
    with open_store(sqlite_url) as store:
        yield TestClient(create_app(store), base_url="http://127.0.0.1"), found


def test_key_history_comes_from_the_change_feed(busy_client: tuple[TestClient, Busy]) -> None:
    # Three `memory put`s without --parents: three versions, none citing the one before.
    client, found = busy_client
    data = client.get("/api/keys/notes/team").json()
    assert [r["id"] for r in data["history"]] == found.notes[::-1]
    assert [r["value"] for r in data["history"]] == NOTES[::-1]
    assert all(r["moved_by"] == "ana" for r in data["history"])
    page = client.get("/keys/notes/team").text
    assert page.count("<tr>") == 4  # header + three versions
    for rid in found.notes:
        assert rid[:12] in page


def test_plan_page_shows_stale_values_side_by_side_and_the_plan_after_it(
    busy_client: tuple[TestClient, Busy],
) -> None:
    client, found = busy_client
    w = found.world
    data = client.get(f"/api/plans/{w.old_plan}").json()
    assert data["superseded_by"] == [w.plan]
    assert data["stale_values"] == [
        {
            "key": "order/7",
            "used": w.order_used,
            "current": w.order_now,
            "used_value": {"status": "confirmed"},
            "current_value": {"status": "changed"},
            "used_kind": "fact",
            "current_kind": "fact",
        }
    ]
    page = client.get(f"/plans/{w.old_plan}").text
    assert f'Superseded by <a class=mono href="/plans/{w.plan}">' in page
    assert "<div class=del>  &quot;status&quot;: &quot;confirmed&quot;</div>" in page
    assert "<div class=ins>  &quot;status&quot;: &quot;changed&quot;</div>" in page
    assert client.get(f"/api/plans/{w.plan}").json()["superseded_by"] == []


def test_janus_memories_render_as_text(busy_client: tuple[TestClient, Busy]) -> None:
    client, _ = busy_client
    data = client.get("/api/keys/team/memory").json()
    assert data["history"][0]["value_text"] == MEMORY and data["history"][0]["text"] is True
    assert data["janus"][0]["memory_text"] == MEMORY
    page = client.get("/keys/team/memory").text
    shown = "Rule 1: say &quot;hello&quot; first.\nRule 2: fact0 &amp; &lt;fact1&gt;"
    assert page.count(f"<div class=memory>{shown}</div>") == 2  # the version and the candidate
    assert "\\n" not in page and "\\&quot;" not in page


def test_decisions_page_shows_messages_and_pages_on(busy_client: tuple[TestClient, Busy]) -> None:
    client, _ = busy_client
    first = client.get("/").text
    assert first.count("<td class=message>the call carries no plan reference</td>") == 200
    older = re.search(r'<a class=older href="/\?([^"]+)">', first)
    assert older is not None
    second = client.get("/?" + older.group(1).replace("&amp;", "&")).text
    # The rest: five more refusals, then the workflow's allow and its replan (with its message).
    assert second.count("<td class=message>the call carries no plan reference</td>") == 5
    assert "plan was derived from outdated versions of order/7; replan once" in second
    assert "class=older" not in second and '<a href="/?">newest</a>' in second
    api = client.get("/api/decisions?limit=5&before=" + str(REFUSALS + 1)).json()
    assert len(api) == 5 and all(d["id"] < REFUSALS + 1 for d in api)

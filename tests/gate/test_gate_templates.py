"""Typed template parameters: `{name:path}` fills several segments, `{name:enc}` any text as one
segment; a value no convertor of its placeholder takes is refused, naming the one that would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import event, example, find, given
from hypothesis import strategies as st

from planfence.plugins.gate import Gate, Policy, PolicyError, ScopeError, ToolCall, create_plan
from planfence.plugins.gate.policy import KeyTemplate
from planfence.plugins.gate.templates import decode_segment, encode_segment
from planfence.shared_memory import StoreLimits, open_async_store
from planfence.shared_memory.records import validate_key

UNBOUNDED = StoreLimits(max_key_length=1 << 30)
POLICY = """
[tools.convert_time]
depends_on = ["clock/{source_timezone:path}"]

[tools.fetch]
depends_on = ["site/{url:enc}"]

[tools.old_style]
depends_on = ["clock/{source_timezone}"]
"""


def test_a_path_fills_several_segments_and_enc_fills_one() -> None:
    policy = Policy.from_toml(POLICY)
    convert, fetch = policy.get("convert_time"), policy.get("fetch")
    assert convert is not None and fetch is not None
    assert convert.scope({"source_timezone": "Europe/Lisbon"}) == ("clock/Europe/Lisbon",)
    assert convert.scope({"source_timezone": "UTC"}) == ("clock/UTC",)
    url = "https://example.com/a b?q=1"
    (key,) = fetch.scope({"url": url})
    assert key == "site/https:=2F=2Fexample.com=2Fa=20b=3Fq=3D1"
    assert decode_segment(key.split("/", 1)[1]) == url


@pytest.mark.parametrize(
    ("template", "value", "names"),
    [
        ("clock/{tz}", "Europe/Lisbon", ["{tz:path}", "{tz:enc}"]),
        ("clock/{tz}", "", ["{tz:enc}"]),
        ("clock/{tz}", "Lisbon time", ["{tz:enc}"]),
        ("files/{p:path}", "/etc//passwd", ["{p:enc}"]),
        ("files/{p:path}", "_/etc/passwd", ["{p:enc}"]),
        ("files/{p:path}", "a/../../secrets", ["{p:enc}"]),
        ("files/{p:path}", "a/./b", ["{p:enc}"]),
        ("files/{p:path}", "a//b", ["{p:enc}"]),
        ("files/{p:path}", "a/b c", ["{p:enc}"]),
    ],
)
def test_a_refused_value_names_the_convertor_that_takes_it(
    template: str, value: str, names: list[str]
) -> None:
    with pytest.raises(ScopeError) as info:
        KeyTemplate.parse(template).fill(
            {template.split("{")[1].split("}")[0].split(":")[0]: value}
        )
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("clock/{tz:paths}", "bad placeholder"),
        ("clock/{tz:}x{", "bad key template"),
        ("clock/{tz!r}", "bad placeholder"),
        ("clock//{tz:path}", "can never fill"),
    ],
)
def test_bad_convertors_fail_when_the_policy_loads(tmp_path: Path, template: str, why: str) -> None:
    f = tmp_path / "p.toml"
    f.write_text("\n[tools.convert]\ndepends_on = [" + json.dumps(template) + "]\n")
    with pytest.raises(PolicyError, match=why) as info:
        Policy.load(f)
    assert info.value.line == 3  # the line holding the template, not [tools.convert]
    assert "[tools.convert]" in str(info.value) and str(f) in str(info.value)


async def test_the_gate_allows_a_path_argument_and_explains_a_refused_one() -> None:
    store = await open_async_store("memory://")
    try:
        await store.own("clock/Europe/Lisbon", "planner")
        tz = await store.put("clock/Europe/Lisbon", {"offset": 0}, author="planner")
        plan = await create_plan(store, author="planner", parents=[tz.id], value={"go": 1})
        gate = Gate(store, Policy.from_toml(POLICY))
        args = {"source_timezone": "Europe/Lisbon"}
        assert (await gate.check(ToolCall("convert_time", args, plan.id))).verdict == "allow"
        refused = await gate.check(ToolCall("old_style", args, plan.id))
        assert (refused.verdict, refused.reason) == ("block", "scope_unresolved")
        assert "{source_timezone:path}" in refused.message
    finally:
        await store.aclose()


@given(st.text() | st.text(st.characters(codec=None, categories=["Cs", "Lu"])))
@example("")
@example("\ud800")
@example("_")
@example("=")
@example("Europe/Lisbon")
@example("é")
def test_enc_round_trips_any_text_into_one_valid_segment(text: str) -> None:
    segment = encode_segment(text)
    # Any length: a key too long for the store is refused when it is filled, as any other.
    validate_key(segment, UNBOUNDED)
    assert "/" not in segment
    assert decode_segment(segment) == text


def lenient_decode(segment: str) -> str | None:
    """What a decoder that skips the canonical check would make of `segment` (None: no text)."""
    body = segment[1:] if segment.startswith("_") else segment
    raw = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "=" and len(body) >= i + 3:
            try:
                raw.append(int(body[i + 1 : i + 3], 16))
            except ValueError:
                pass
            else:
                i += 3
                continue
        raw += body[i].encode("utf-8", "surrogatepass")
        i += 1
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def near_miss(segment: str, how: str, at: int) -> str:
    """A small change to a canonical encoding of the kind a lenient decoder accepts."""
    at = at % max(len(segment), 1)
    if how == "escape a kept character":
        return (
            segment[:at]
            + "".join(f"={b:02X}" for b in segment[at : at + 1].encode())
            + (segment[at + 1 :])
        )
    if how == "lower-case an escape":
        i = segment.find("=", at)
        return (
            segment
            if i < 0
            else segment[: i + 1] + segment[i + 1 : i + 3].lower() + (segment[i + 3 :])
        )
    if how == "unescape an escape":
        i = segment.find("=", at)
        if i < 0 or len(segment) < i + 3:
            return segment
        return segment[:i] + chr(int(segment[i + 1 : i + 3], 16)) + segment[i + 3 :]
    if how == "drop the leading _":
        return segment[1:] if segment.startswith("_") else segment
    return "_" + segment  # add a leading _


CANONICAL = st.text(st.characters(codec="utf-8"), max_size=8).map(encode_segment)
NEAR_MISSES = st.builds(
    near_miss,
    CANONICAL,
    st.sampled_from(
        [
            "escape a kept character",
            "lower-case an escape",
            "unescape an escape",
            "drop the leading _",
            "add a leading _",
        ]
    ),
    st.integers(0, 40),
)
SEGMENTS = CANONICAL | NEAR_MISSES | st.text(alphabet="ab_.-:@+=/%0F", max_size=8)


@given(SEGMENTS)
def test_only_canonical_encodings_decode(segment: str) -> None:
    """A segment decodes exactly when it is the encoding of some text (the one a lenient
    decoder finds, encoded again), and then to that text."""
    lenient = lenient_decode(segment)
    canonical = lenient is not None and encode_segment(lenient) == segment
    try:
        text = decode_segment(segment)
    except ValueError:
        event("refused")
        assert not canonical, f"{segment!r} encodes {lenient!r} but does not decode"
        return
    event("decoded")
    assert canonical and text == lenient
    assert encode_segment(text) == segment


# Values made of the characters that could move a key: separators, dots, and key characters.
VALUES = st.text(alphabet="ab1_.-:@+=/ %é", max_size=12) | st.integers(0, 99)
TEMPLATE = "pre/{one}/mid/{many:path}/x/{any:enc}/post"


def as_segments(path: object) -> str:
    """The segments `{p:path}` fills from `path`: an absolute path's `/` is the segment `_`."""
    text = str(path)
    return "_" if text == "/" else "_" + text if text.startswith("/") else text


def stays_in_place(key: str, many: object) -> bool:
    """The literal segments are where the template put them, each value fills exactly its own
    segments (one, or as many as the path has), and none of them is empty, `.` or `..`."""
    parts = key.split("/")
    width = len(as_segments(many).split("/"))
    return (
        len(parts) == 6 + width
        and (parts[0], parts[2], parts[3 + width], parts[-1]) == ("pre", "mid", "x", "post")
        and not {"", ".", ".."} & set(parts)
    )


@given(VALUES, VALUES, VALUES)
def test_no_filled_value_escapes_its_segments(one: object, many: object, any_: object) -> None:
    template = KeyTemplate.parse(TEMPLATE)
    try:
        key = template.fill({"one": one, "many": many, "any": any_})
    except ScopeError:
        return
    assert stays_in_place(key, many)
    parts = key.split("/")
    assert parts[1] == str(one) and "/".join(parts[3:-3]) == as_segments(many)
    assert decode_segment(parts[-2]) == str(any_)


def test_control_a_fill_without_convertors_lets_values_escape() -> None:
    # The property above can fail: plain substitution moves keys with the very same values.
    def naive(values: tuple[object, object, object]) -> str:
        one, many, any_ = (str(v) for v in values)
        return f"pre/{one}/mid/{many}/x/{any_}/post"

    found = find(st.tuples(VALUES, VALUES, VALUES), lambda v: not stays_in_place(naive(v), v[1]))
    assert not stays_in_place(naive(found), found[1])


def test_an_encoded_value_too_long_for_a_key_is_refused() -> None:
    with pytest.raises(ScopeError, match="over 256") as info:
        KeyTemplate.parse("site/{url:enc}").fill({"url": "é" * 60})
    assert "takes any text" not in str(info.value)  # no convertor would take it: none named

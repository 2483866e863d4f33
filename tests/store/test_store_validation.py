"""Keys, agent ids and record ids are validated as whole strings: no control character, and in
particular no trailing newline (which a `$` anchor would let through), is ever accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence.shared_memory import InvalidKeyError
from planfence.shared_memory.errors import InvalidValueError
from planfence.shared_memory.records import (
    is_record_id,
    validate_agent,
    validate_key,
    validate_record_id,
)

# Every control character, with the ones a regex anchor or a terminal treats specially first.
CONTROL = st.sampled_from("\n\r\x00\t\x0b\x0c\x1b\x7f\x85") | st.characters(categories=["Cc"])
KEY_CHARS = st.sampled_from("abcXYZ019_.-:@+=/")
ID_CHARS = st.sampled_from("0123456789abcdef")


@st.composite
def with_control(draw: st.DrawFn, base: st.SearchStrategy[str]) -> str:
    """A string that would otherwise be plausible, with a control character at any place."""
    text = draw(base)
    at = draw(st.just(len(text)) | st.integers(0, len(text)))  # the end first: `$` matches there
    return text[:at] + draw(CONTROL) + text[at:]


@given(with_control(st.text(KEY_CHARS, min_size=1, max_size=40)))
def test_no_key_holds_a_control_character(text: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key(text)


@given(with_control(st.text(KEY_CHARS.filter(lambda c: c not in "/+="), max_size=40)))
def test_no_agent_holds_a_control_character(text: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_agent(text)


@given(with_control(st.text(ID_CHARS, min_size=63, max_size=64)))
def test_no_record_id_holds_a_control_character(text: str) -> None:
    assert not is_record_id(text)
    with pytest.raises(InvalidValueError):
        validate_record_id(text)


@pytest.mark.parametrize("suffix", ["\n", "\r\n", "\r", "\x00", "\t"])
def test_trailing_control_characters_are_refused(suffix: str) -> None:
    with pytest.raises(InvalidKeyError):
        validate_key("order/7" + suffix)
    with pytest.raises(InvalidKeyError):
        validate_agent("sales" + suffix)
    assert not is_record_id("a" * 64 + suffix)

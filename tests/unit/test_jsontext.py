"""The stored JSON text: compact, strict, non-ASCII as is, never a lone surrogate."""

from __future__ import annotations

import math

import pytest

from tasklab.core.jsontext import check_text, dumps
from tasklab.core.policy import storable


def test_compact_and_non_ascii_as_is():
    assert dumps({"a": [1, 2], "b": "ü字"}) == '{"a":[1,2],"b":"ü字"}'


@pytest.mark.parametrize("value", [math.nan, math.inf, {"x": object()}, {1j: 1}])
def test_not_json_is_refused(value):
    with pytest.raises((TypeError, ValueError)):
        dumps(value)


@pytest.mark.parametrize("value", ["\ud800", {"k": ["ok", "x\udfffy"]}, {"\ud83d": 1}])
def test_lone_surrogates_are_refused_where_the_value_becomes_text(value):
    with pytest.raises(ValueError, match="lone surrogate"):
        dumps(value)


def test_a_surrogate_pair_written_as_one_character_is_text():
    assert check_text("😀") == "😀"
    assert dumps("😀") == '"😀"'


def test_error_messages_are_made_storable_not_refused():
    assert storable("plain") == "plain"
    assert storable("bad \ud800") == "bad \\ud800"

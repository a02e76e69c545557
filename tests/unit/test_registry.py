from __future__ import annotations

from typing import Any

import pytest

from tasklab.core.registry import Registry, TaskDef
from tasklab.errors import InvalidPayload, UnknownTask


def invoice(ctx: Any, order_id: int, email: str, note: str | None = None) -> dict:
    return {}


SPEC = TaskDef("shop.send_invoice", invoice)


def test_valid_payload_passes():
    assert SPEC.validate({"order_id": 1, "email": "a@b"}) == {"order_id": 1, "email": "a@b"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "JSON object"),
        ("text", "JSON object"),
        ({"order_id": 1}, "missing a required argument: 'email'"),
        ({"order_id": 1, "email": "x", "extra": 1}, "unexpected keyword argument"),
        ({"order_id": "one", "email": "x"}, "'order_id' must be integer"),
        ({"order_id": 1, "email": 5}, "'email' must be string"),
        ({"order_id": 1, "email": "x", "note": 3}, "'note' must be string or null"),
        ({"order_id": float("nan"), "email": "x"}, "not JSON"),
        ({"order_id": 1, "email": "x" * (1024 * 1024 + 1)}, "larger than"),
    ],
)
def test_bad_payloads_are_refused_with_a_clear_message(payload, message):
    with pytest.raises(InvalidPayload, match=message):
        SPEC.validate(payload)


def test_bool_is_not_an_integer():
    with pytest.raises(InvalidPayload):
        SPEC.validate({"order_id": True, "email": "x"})


def test_json_schema_from_signature():
    schema = SPEC.json_schema()
    assert schema["required"] == ["order_id", "email"]
    assert schema["properties"]["order_id"] == {"type": "integer"}
    assert schema["properties"]["note"]["type"] == ["string", "null"]
    assert schema["additionalProperties"] is False


def test_registry_refuses_unknown_and_duplicate_names():
    reg = Registry()
    reg.add(SPEC)
    reg.add(SPEC)  # the same function again is fine
    with pytest.raises(ValueError, match="already registered"):
        reg.add(TaskDef("shop.send_invoice", lambda ctx: None))
    with pytest.raises(UnknownTask):
        reg.get("nope")


def test_a_task_needs_a_context_parameter():
    with pytest.raises(TypeError, match="TaskContext"):
        TaskDef("x", lambda: None)


def test_the_fast_payload_check_agrees_with_signature_bind():
    """Submits check a plain signature's payload with set operations instead of
    `Signature.bind`; every case must end as bind would have it."""
    import pytest as _pytest

    from tasklab.core.registry import Registry
    from tasklab.errors import InvalidPayload

    reg = Registry()

    def fn(ctx, text: str, top: int = 3, *, flag: bool = False):  # type: ignore[no-untyped-def]
        return None

    def loose(ctx, text: str, **rest):  # type: ignore[no-untyped-def]
        return None

    from tasklab.core.registry import TaskDef

    plain, open_ = TaskDef("t.plain", fn), TaskDef("t.loose", loose)
    reg.add(plain)
    assert plain.validate({"text": "a"}) == {"text": "a"}
    assert plain.validate({"text": "a", "top": 1, "flag": True})["flag"] is True
    for bad in ({}, {"top": 1}, {"text": "a", "nope": 1}, {"text": 1}, {"text": "a", "top": "x"}):
        with _pytest.raises(InvalidPayload):
            plain.validate(bad)
    assert open_.validate({"text": "a", "extra": [1]}) == {"text": "a", "extra": [1]}
    with _pytest.raises(InvalidPayload):
        open_.validate({"extra": 1})

"""`retried`: again while the database comes back, never longer than told."""

from __future__ import annotations

import time

import pytest

from tasklab.errors import InvalidPayload, SessionLost
from tasklab.retrying import retried


def _failing(times: int, error: BaseException):  # type: ignore[no-untyped-def]
    calls: list[int] = []

    def fn() -> int:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return len(calls)

    return fn, calls


def test_it_tries_again_until_the_call_succeeds():
    fn, calls = _failing(3, SessionLost("gone"))
    assert retried(fn, SessionLost, within=5.0) == 4 and len(calls) == 4


def test_it_gives_up_in_time_with_the_last_error():
    fn, calls = _failing(1000, SessionLost("gone"))
    started = time.monotonic()
    with pytest.raises(SessionLost):
        retried(fn, SessionLost, within=0.3)
    assert time.monotonic() - started < 1.0 and 2 <= len(calls) < 10


def test_other_errors_are_not_retried():
    fn, calls = _failing(5, InvalidPayload("bad"))
    with pytest.raises(InvalidPayload):
        retried(fn, SessionLost, within=5.0)
    assert len(calls) == 1

"""The pure parts of SPEC §7: submit options, rates, durations, the limited claim's
choice and token bucket, and schedule ticks with each catch-up policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tasklab.core.queueing import Rate, SubmitOptions, parse_duration, parse_rate
from tasklab.core.schedules import MAX_CATCH_UP, ScheduleDef, tick_key
from tasklab.errors import InvalidPayload
from tasklab.store.shared.claims import allowance, choose, lock_key


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1.5", 1.5),
        (" 250ms ", 0.25),
        (0, 0),
        ("1d", 86400),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["-1", -1, "5x", "", "nan", float("inf"), True, "11000d", None, [1]]
)
def test_bad_durations_are_refused(bad):
    with pytest.raises(InvalidPayload):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("100/s", Rate(100, 1)), ("600/m", Rate(600, 60)), ("10000/h", Rate(10000, 3600))],
)
def test_rates(text, rate):
    assert parse_rate(text) == rate and str(rate) == text


@pytest.mark.parametrize("bad", ["100", "0/s", "10/w", "a/s", "-1/s", 5, "2000000/s"])
def test_bad_rates_are_refused(bad):
    with pytest.raises(InvalidPayload):
        parse_rate(bad)


@pytest.mark.parametrize(
    "options",
    [
        {"priority": 101},
        {"priority": -101},
        {"priority": 1.5},
        {"priority": True},
        {"queue": "has space"},
        {"queue": "x" * 65},
        {"queue": ""},
        {"delay": -1},
        {"run_at": "2026-01-01T00:00:00"},  # naive
        {"run_at": datetime(2026, 1, 1)},  # naive
        {"run_at": "not a time"},
        {"run_at": "2026-01-01T00:00:00Z", "delay": 5},  # both
        {"concurrency_key": ""},
        {"unique_key": "x" * 201},
    ],
)
def test_bad_submit_options_are_refused(options):
    with pytest.raises(InvalidPayload):
        SubmitOptions.of(**options)


def test_submit_options_from_the_wire():
    opts = SubmitOptions.from_wire(
        {"run_at": "2030-01-01T10:00:00+02:00", "queue": "mail", "priority": -5, "task": "x"}
    )
    assert opts.run_at == datetime(2030, 1, 1, 8, tzinfo=UTC)
    assert (opts.queue, opts.priority, opts.delay) == ("mail", -5, None)
    assert SubmitOptions.from_wire({"delay": "5m"}).delay == 300


def _row(**kw):
    row = {"paused": 0, "concurrency": None, "running": 0, "rate_count": None}
    row.update(rate_period=None, tokens=None)
    row.update(kw)
    return row


def test_allowance_takes_the_smallest_room():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert allowance(_row(), 32, now, None).left == 32
    assert allowance(_row(paused=1), 32, now, None).left == 0
    assert allowance(_row(concurrency=5, running=3), 32, now, None).left == 2
    assert allowance(_row(concurrency=5, running=7), 32, now, None).left == 0
    # a bucket of 5 (5/s) holding 1.5 tokens 0.3 s ago: 3 tokens now
    found = allowance(
        _row(rate_count=5, rate_period=1.0, tokens=1.5), 32, now, now - timedelta(seconds=0.3)
    )
    assert found.left == 3 and found.tokens == pytest.approx(3.0)
    # refilling stops at the bucket's size
    full = allowance(
        _row(rate_count=5, rate_period=1.0, tokens=0), 32, now, now - timedelta(hours=1)
    )
    assert full.left == 5 and full.tokens == 5


def _cand(tid, priority=0, at=0.0, key=None, limit=None, queue="q", task="t"):
    return {
        "id": tid,
        "priority": priority,
        "run_after": at,
        "concurrency_key": key,
        "concurrency_limit": limit,
        "queue": queue,
        "task": task,
    }


def test_choose_merges_queues_by_priority_and_respects_each_limit():
    a = [_cand("a1", 5, 1, queue="a"), _cand("a2", 0, 2, queue="a")]
    b = [_cand("b1", 9, 3, queue="b"), _cand("b2", 5, 0, queue="b"), _cand("b3", 5, 4, queue="b")]
    chosen = choose({"a": a, "b": b}, {"a": 10, "b": 2}, {}, 10)
    assert [c["id"] for c in chosen] == ["b1", "b2", "a1", "a2"]  # b's room is 2
    assert [c["id"] for c in choose({"a": a, "b": b}, {"a": 10, "b": 10}, {}, 2)] == ["b1", "b2"]


def test_choose_keeps_keys_under_their_limit_counting_the_live_ones():
    rows = [
        _cand("1", key="k", limit=1),
        _cand("2", key="k", limit=1),
        _cand("3", key="j", limit=2),
        _cand("4", key="j", limit=2),
        _cand("5", key="j", limit=2),
        _cand("6"),
    ]
    chosen = choose({"q": rows}, {"q": 10}, {("t", "j"): 1}, 10)
    assert [c["id"] for c in chosen] == ["1", "3", "6"]


def test_lock_keys_are_stable_and_signed_64_bit():
    assert lock_key("queue", "mail") == lock_key("queue", "mail")
    assert lock_key("queue", "mail") != lock_key("keys", "mail")
    assert -(2**63) <= lock_key("queue", "x") < 2**63


def test_interval_ticks_are_whole_multiples_since_the_epoch():
    spec = ScheduleDef.checked("s", "t", every=60)
    at = datetime(2026, 1, 1, 10, 0, 30, tzinfo=UTC)
    assert spec.next_after(at) == datetime(2026, 1, 1, 10, 1, tzinfo=UTC)
    assert spec.next_after(datetime(2026, 1, 1, 10, 1, tzinfo=UTC)).minute == 2  # strictly after
    assert tick_key("s", spec.next_after(at)) == "schedule:s:2026-01-01T10:01:00Z"


def test_cron_ticks_in_a_timezone_across_a_dst_change():
    spec = ScheduleDef.checked("s", "t", cron="30 2 * * *", timezone="Europe/Paris")
    # 2026-03-29: 02:00 -> 03:00 in Paris, so 02:30 does not exist that night
    ticks = spec.ticks_after(datetime(2026, 3, 27, 12, tzinfo=UTC))
    first, second, third = next(ticks), next(ticks), next(ticks)
    assert first == datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 02:30 CET
    assert second == datetime(2026, 3, 29, 1, tzinfo=UTC)  # the gap's tick, at 03:00 CEST
    assert third == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)  # 02:30 CEST


@pytest.mark.parametrize(
    "bad",
    [
        {"cron": "61 * * * *"},
        {"cron": "* * *"},
        {"cron": "*/5 * * * *", "every": 60},
        {},
        {"every": 0.5},
        {"every": -1},
        {"every": 60, "catch_up": "sometimes"},
        {"every": 60, "timezone": "Mars/Olympus"},
        {"every": 60, "payload": [1]},
    ],
)
def test_bad_schedules_are_refused(bad):
    with pytest.raises(InvalidPayload):
        ScheduleDef.checked("s", "t", **bad)


def test_catch_up_after_downtime():
    hourly = {"every": 3600}
    missed_from = datetime(2026, 1, 1, 5, tzinfo=UTC)  # 05:00 was the next tick
    now = datetime(2026, 1, 1, 10, 20, tzinfo=UTC)  # came back at 10:20
    latest = ScheduleDef.checked("s", "t", catch_up="latest", **hourly)
    assert latest.due(missed_from, now) == (
        [datetime(2026, 1, 1, 10, tzinfo=UTC)],
        datetime(2026, 1, 1, 11, tzinfo=UTC),
    )
    every = ScheduleDef.checked("s", "t", catch_up="all", **hourly)
    ticks, following = every.due(missed_from, now)
    assert [t.hour for t in ticks] == [5, 6, 7, 8, 9, 10] and following.hour == 11
    skip = ScheduleDef.checked("s", "t", catch_up="skip", **hourly)
    assert skip.due(missed_from, now) == ([], datetime(2026, 1, 1, 11, tzinfo=UTC))
    # on time (seconds late), skip submits the tick like the others
    on_time = datetime(2026, 1, 1, 10, 0, 2, tzinfo=UTC)
    assert skip.due(datetime(2026, 1, 1, 10, tzinfo=UTC), on_time)[0] == [on_time.replace(second=0)]
    # nothing due yet
    assert latest.due(datetime(2026, 1, 1, 11, tzinfo=UTC), now) == (
        [],
        datetime(2026, 1, 1, 11, tzinfo=UTC),
    )


def test_catch_up_all_is_bounded_per_pass():
    spec = ScheduleDef.checked("s", "t", every=1, catch_up="all")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ticks, following = spec.due(start, start + timedelta(hours=1))
    assert len(ticks) == MAX_CATCH_UP and following == start + timedelta(seconds=MAX_CATCH_UP)


def test_run_at_keeps_its_instant_whatever_the_offset():
    east = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=9)))
    assert SubmitOptions.of(run_at=east).run_at == datetime(2030, 1, 1, 3, tzinfo=UTC)


NEAR_THE_END = [
    datetime.max.replace(tzinfo=UTC),
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-14))),  # past 9999 in UTC
    datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),  # before year 1 in UTC
    datetime.now(UTC) + timedelta(days=3660),
    datetime.now(UTC) - timedelta(days=3660),
]


@pytest.mark.parametrize("at", NEAR_THE_END, ids=range(len(NEAR_THE_END)))
def test_a_run_at_beyond_ten_years_either_way_is_refused(at):
    with pytest.raises(InvalidPayload, match="within ten years"):
        SubmitOptions.of(run_at=at)


def test_a_run_at_within_ten_years_is_kept():
    for at in (datetime.now(UTC) + timedelta(days=3640), datetime.now(UTC) - timedelta(days=3640)):
        assert SubmitOptions.of(run_at=at).run_at == at

"""The gate of turns (runners/turns.py): N at once, in claim order, given up cleanly."""

from __future__ import annotations

import threading

from tasklab.runners.turns import Gate


def test_turns_go_in_claim_order_whatever_the_order_places_were_taken():
    gate = Gate(1)
    (first,) = gate.take_places([5.0])
    assert gate.wait(first, 0)  # a free turn: at once
    late = gate.take_places([9.0, 9.0])  # a later batch lines up first
    early = gate.take_places([7.0, 7.0])  # an earlier batch, handed over after it
    order = []
    for place in [*early, *late]:
        assert not gate.wait(place, 0)
    gate.end(first)
    for _ in range(4):
        granted = [p for p in [*early, *late] if p.granted and p not in order]
        assert len(granted) == 1  # one turn at a time
        order.append(granted[0])
        gate.end(granted[0])
    assert order == [*early, *late]  # by sent time, then each batch's own order


def test_a_place_given_up_is_passed_over_and_a_turn_given_up_goes_on():
    gate = Gate(1)
    a, b, c = gate.take_places([1.0, 2.0, 3.0])
    gate.leave(b)  # given back before its turn
    gate.leave(a)  # a granted turn given up: the next place still in line gets it
    assert not b.granted and c.granted
    gate.leave(a)  # twice is once
    gate.end(c)
    (d,) = gate.take_places([4.0])
    assert gate.wait(d, 0)


def test_interrupt_wakes_every_place_in_line_and_grants_none():
    gate = Gate(1)
    holder, waiting = gate.take_places([1.0, 2.0])
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(gate.wait(waiting, None)))
    t.start()
    gate.interrupt()
    t.join(5)
    assert woke == [False] and not t.is_alive()
    (later,) = gate.take_places([3.0])
    assert not gate.wait(later, None)  # does not wait once interrupted
    assert holder.granted


def test_the_longest_run_and_the_mean_run_time():
    gate = Gate(2)
    a, b = gate.take_places([1.0, 1.0])
    assert gate.longest_run(a.since + 0.5) >= 0.5
    gate.end(a)
    gate.end(b)
    assert gate.longest_run(b.since + 10) == 0.0
    assert 0 <= gate.mean_run < 0.01

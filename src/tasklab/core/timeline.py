"""A task's attempts as the console's timeline shows them, from its stored events and
snapshot (pure): each attempt's epoch, the claim that ran it (lease owner), its lease,
when it began, and how it ended — a retry's error, a lease that expired, a wait, or for
the last attempt the task's own state."""

from __future__ import annotations

from typing import Any

from tasklab.core.models import JSON, Claim, Event, Outcome, TaskSnapshot

TIMELINE_EVENTS = ("attempt", "resumed", "retry", "lease_expired", "waiting")


def attempt_event(claim: Claim, lease: float) -> dict[str, Any]:
    """An attempt's first event: which claim runs it (its epoch and lease owner) and
    for how long a lease lasts."""
    return {"attempt": claim.attempt, "epoch": claim.epoch, "worker": claim.owner, "lease": lease}


def outcome_events(outcome: Outcome, attempt: int) -> list[tuple[str, JSON]]:
    """What an attempt's ending adds to the timeline before its terminal write: a
    retry's error and backoff; a suspension's wait (streamed before it ends)."""
    if outcome.kind == "retry" and outcome.error is not None:
        retry: JSON = {
            "attempt": attempt,
            "error": outcome.error.code,
            "message": outcome.error.message[:500],
            "delay": outcome.retry_delay,
        }
        return [("retry", retry)]
    if outcome.kind == "suspend" and outcome.wait is not None:
        wait = outcome.wait
        waiting: JSON = {
            "kind": wait["kind"],
            "until": wait["wake_at"],
            "signal": wait["name"],
            "children": wait["children"],
        }
        return [("waiting", waiting)]
    return []


def attempts(events: list[Event], snap: TaskSnapshot) -> list[dict[str, JSON]]:
    runs: list[dict[str, Any]] = []
    for e in events:
        data = e.data if isinstance(e.data, dict) else {}
        if e.type in ("attempt", "resumed"):
            runs.append(
                {
                    "attempt": data.get("attempt", e.attempt),
                    "resumed": e.type == "resumed",
                    "epoch": data.get("epoch"),
                    "worker": data.get("worker"),
                    "lease": data.get("lease"),
                    "started_at": e.at.isoformat(),
                    "outcome": None,
                    "detail": None,
                }
            )
        elif runs and e.type == "retry":
            again = f"again in {data.get('delay', 0):.1f}s"
            detail = f"{data.get('error')}: {data.get('message')} ({again})"
            runs[-1].update(outcome="retried", detail=detail)
        elif runs and e.type == "lease_expired":
            runs[-1].update(outcome="lease expired", detail=f"then {data.get('state')}")
        elif runs and e.type == "waiting":
            runs[-1].update(outcome="suspended", detail=f"waiting for {data.get('kind')}")
    if runs and runs[-1]["outcome"] is None:
        last = runs[-1]
        if snap.terminal:
            last["outcome"] = snap.state.value
            last["detail"] = f"{snap.error.code}: {snap.error.message}" if snap.error else None
        else:
            # queued again with no ending recorded: its claim was released unrun
            last["outcome"] = "released" if snap.state.value == "queued" else snap.state.value
    return runs

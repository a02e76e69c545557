"""`approval_flow`: the built-in example of a durable function (SPEC §8) — it streams a
draft, waits (without holding a slot) for someone to send it an `approve` signal,
spawns three `wordfreq` children over the parts of the text, joins them and returns a
report. Kill its worker anywhere: nothing it finished runs again."""

from __future__ import annotations

from collections import Counter
from typing import Any

from tasklab.errors import InvalidPayload

DEFAULT_TEXT = (
    "A task that waits for a person should not hold a worker while it waits. "
    "It should come back when the person answers, and do every finished step once. "
    "Durable functions do exactly that: steps answered from a journal, waits that end "
    "the execution, children that run on their own and are joined when they end."
)
PARTS = 3


def check(payload: dict[str, Any], data_dir: Any) -> None:
    text = payload.get("text", DEFAULT_TEXT)
    if not isinstance(text, str) or not text.strip():
        raise InvalidPayload("text must be some words")


def _draft(text: str) -> str:
    words = text.split()
    return f"Draft: count the words of {len(words)} words in {PARTS} parts. First words: " + (
        " ".join(words[:12]) + " …"
    )


def _parts(text: str) -> list[str]:
    words = text.split()
    size = max(1, -(-len(words) // PARTS))
    return [" ".join(words[i : i + size]) for i in range(0, len(words), size)][:PARTS]


def approval_flow(ctx: Any, text: str = DEFAULT_TEXT, top: int = 5) -> dict[str, Any]:
    """Stream a draft, wait for the `approve` signal, count the words of each part in a
    child `wordfreq` task, join them, report."""
    draft = ctx.step("draft", _draft, text)
    # streamed once, not on every run (again only if its run died inside the step)
    ctx.step("stream the draft", ctx.stream, draft + "\n", retry_safe=True)
    decision = ctx.wait_signal("approve")
    approved = not isinstance(decision, dict) or decision.get("approved", True) is not False
    if not approved:
        return {"approved": False, "by": decision.get("by") if isinstance(decision, dict) else None}
    children = [
        ctx.spawn("wordfreq", {"text": part, "top": top}, key=f"part-{n}")
        for n, part in enumerate(_parts(text))
    ]
    ended = ctx.join(children)
    totals: Counter[str] = Counter()
    for snap in ended:
        if snap["state"] == "succeeded":
            totals.update({w: c for w, c in snap["result"]["top"]})
    return {
        "approved": True,
        "by": decision.get("by") if isinstance(decision, dict) else None,
        "children": [{"id": s["id"], "state": s["state"]} for s in ended],
        "top": [[w, c] for w, c in sorted(totals.items(), key=lambda wc: (-wc[1], wc[0]))[:top]],
    }

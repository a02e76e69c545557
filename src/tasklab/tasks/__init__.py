"""Built-in tasks, registered on every TaskApp."""

from __future__ import annotations

from tasklab.core.registry import Registry, TaskDef
from tasklab.tasks import approval_flow, stream_text, wordfreq


def register_builtins(registry: Registry) -> None:
    """`wordfreq`, `stream_text` and `approval_flow` (the durable example)."""
    registry.add(
        TaskDef(
            "wordfreq", wordfreq.wordfreq, check=wordfreq.check, async_fn=wordfreq.wordfreq_async
        )
    )
    registry.add(TaskDef("approval_flow", approval_flow.approval_flow, check=approval_flow.check))
    registry.add(
        TaskDef(
            "stream_text",
            stream_text.stream_text,
            check=stream_text.check,
            async_fn=stream_text.stream_text_async,
        )
    )

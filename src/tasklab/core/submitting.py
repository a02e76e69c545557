"""Turning what a caller asked for into a `NewTask`: the one check of a submit, used by
every interface and by the scheduler. Nothing is stored here."""

from __future__ import annotations

from typing import Any

from tasklab.core.jsontext import check_text
from tasklab.core.models import NewTask
from tasklab.core.queueing import NO_OPTIONS, SubmitOptions
from tasklab.core.registry import Registry
from tasklab.errors import InvalidPayload


def prepare(
    registry: Registry,
    task: str,
    payload: object,
    key: str | None,
    max_attempts: int | None,
    options: SubmitOptions = NO_OPTIONS,
    *,
    request_bound: bool = False,
    data_dir: Any = None,
) -> NewTask:
    spec = registry.get(task)
    valid, encoded = spec.validate_encoded(payload, data_dir)
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 200):
        raise InvalidPayload("idempotency_key must be a string of 1 to 200 characters")
    if key is not None:
        try:
            check_text(key)
        except ValueError as exc:
            raise InvalidPayload(f"idempotency_key is not text: {exc}") from None
    if max_attempts is not None and (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= 1000
    ):
        raise InvalidPayload("max_attempts must be an integer from 1 to 1000")
    if options.concurrency_key is not None and spec.concurrency_limit is None:
        raise InvalidPayload(
            f"task {spec.name!r} has no concurrency_limit; a concurrency_key would limit nothing"
        )
    if request_bound and (options.run_at is not None or options.delay):
        raise InvalidPayload("a request-bound task runs now: no run_at or delay")
    return NewTask(
        task=spec.name,
        payload=valid,
        max_attempts=max_attempts or spec.max_attempts,
        retry_safe=spec.retry_safe,
        idempotency_key=key,
        request_bound=request_bound,
        timeout=spec.timeout,
        payload_json=encoded,
        queue=options.queue or spec.queue,
        priority=spec.priority if options.priority is None else options.priority,
        run_at=options.run_at,
        delay=options.delay,
        concurrency_key=options.concurrency_key,
        concurrency_limit=spec.concurrency_limit if options.concurrency_key else None,
        unique_key=options.unique_key,
    )

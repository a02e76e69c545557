"""Every error tasklab raises on purpose.

    TasklabError                      code
     ├── UnknownTask                  unknown_task
     ├── InvalidPayload               invalid_payload
     ├── IdempotencyConflict          idempotency_conflict
     ├── TaskNotFound                 not_found
     ├── TaskTerminal                 task_terminal
     ├── QueueFull (+ BufferError)    queue_full
     ├── WorkerAlive                  worker_alive
     ├── LeaseLost                    lease_lost
     ├── ShuttingDown                 shutting_down
     ├── IllegalTransition            illegal_transition
     └── StoreError                   store_error
          └── SessionLost             store_error

`Cancelled` is deliberately *not* here: it is a `BaseException`, like
`asyncio.CancelledError`, so that `except Exception` in user code cannot swallow a
cancellation. Each class carries its wire `code` as a class attribute; the HTTP and
JSON-lines edges put it in `{"error": {"code", "message"}}`.
"""

from __future__ import annotations


class TasklabError(Exception):
    """Root of every tasklab error."""

    code = "tasklab_error"

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": str(self)}


class UnknownTask(TasklabError):
    """Raised when a task name is not registered on the app (or worker)."""

    code = "unknown_task"


class InvalidPayload(TasklabError):
    """Raised at submit when a payload is not a JSON object, is too large, or does not
    fit the task function's parameters. Nothing is stored."""

    code = "invalid_payload"


class IdempotencyConflict(TasklabError):
    """Raised when an idempotency key exists for a different task name or payload."""

    code = "idempotency_conflict"


class TaskNotFound(TasklabError):
    """Raised when a task id is unknown to the store."""

    code = "not_found"


class TaskTerminal(TasklabError):
    """Raised when a signal is sent to a task that has ended (nothing is recorded)."""

    code = "task_terminal"


class TaskLive(TasklabError):
    """Raised when a retry is asked of a task that has not ended (terminal states are
    final; a retry is a new task made of an ended one)."""

    code = "task_live"


class TaskFailed(TasklabError):
    """Raised by `TaskHandle.result()` for a task that ended failed; `snapshot` holds
    its stored error (`snapshot.error.code`: task_error, outcome_unknown, …)."""

    code = "task_failed"

    def __init__(self, message: str, snapshot: object = None) -> None:
        super().__init__(message)
        self.snapshot = snapshot


class TaskCancelled(TasklabError):
    """Raised by `TaskHandle.result()` for a task that ended cancelled (`snapshot`)."""

    code = "task_cancelled"

    def __init__(self, message: str, snapshot: object = None) -> None:
        super().__init__(message)
        self.snapshot = snapshot


class QueueFull(TasklabError, BufferError):
    """Raised by `runner.submit()` when workers + backlog slots are all taken; the task
    stays `queued`."""

    code = "queue_full"


class WorkerAlive(TasklabError):
    """Raised by `recover_running()` while another executor holds the liveness lock."""

    code = "worker_alive"


class LeaseLost(TasklabError):
    """Raised when a fenced write matches no row: the epoch moved on, the lease expired,
    or the task is no longer live. The executor stops and publishes nothing more."""

    code = "lease_lost"


class ShuttingDown(TasklabError):
    """Raised when work is offered to a runner, worker or server that is closing."""

    code = "shutting_down"


class IllegalTransition(TasklabError):
    """Raised when the state machine is asked for a transition it does not allow."""

    code = "illegal_transition"


class StoreError(TasklabError):
    """A store could not be opened or answered in a way tasklab cannot interpret."""

    code = "store_error"


class ForeignConnection(TasklabError, TypeError):
    """Raised by `submit(..., connection=)` for a connection that is not on this
    store's database (another file or server, another kind of driver, an async
    connection). Nothing is written."""

    code = "foreign_connection"


class SessionLost(StoreError):
    """The database session broke mid-call (a server restart, a killed backend, a
    dropped connection). Whether a write committed is unknown; the next call gets a new
    session."""


class Cancelled(BaseException):
    """Raised by `ctx.checkpoint()` when cancellation was requested for the task.

    A `BaseException` so that `except Exception` around user code does not swallow it.
    """

    code = "cancelled"

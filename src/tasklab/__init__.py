"""tasklab: durable task execution that tells the truth.

The public API; everything else is internal and may change.
"""

from tasklab.app import TaskApp
from tasklab.config import Settings
from tasklab.core.context import Effect, TaskContext
from tasklab.core.filters import TaskFilter
from tasklab.core.models import (
    CancelOutcome,
    ErrorInfo,
    Event,
    Page,
    RunnerCancelOutcome,
    TaskSnapshot,
)
from tasklab.core.states import CancelReason, ErrorCode, State
from tasklab.errors import (
    Cancelled,
    ForeignConnection,
    IdempotencyConflict,
    InvalidPayload,
    LeaseLost,
    QueueFull,
    ShuttingDown,
    TaskCancelled,
    TaskFailed,
    TasklabError,
    TaskLive,
    TaskNotFound,
    UnknownTask,
    WorkerAlive,
)
from tasklab.handles import TaskHandle
from tasklab.runners.aio import AsyncTaskRunner
from tasklab.runners.process import ProcessTaskRunner
from tasklab.runners.thread import ThreadTaskRunner
from tasklab.typed import Task

__all__ = [
    "AsyncTaskRunner",
    "CancelOutcome",
    "CancelReason",
    "Cancelled",
    "Effect",
    "ErrorCode",
    "ErrorInfo",
    "Event",
    "ForeignConnection",
    "IdempotencyConflict",
    "InvalidPayload",
    "LeaseLost",
    "Page",
    "ProcessTaskRunner",
    "QueueFull",
    "RunnerCancelOutcome",
    "Settings",
    "ShuttingDown",
    "State",
    "Task",
    "TaskApp",
    "TaskCancelled",
    "TaskContext",
    "TaskFailed",
    "TaskFilter",
    "TaskHandle",
    "TaskLive",
    "TaskNotFound",
    "TaskSnapshot",
    "TasklabError",
    "ThreadTaskRunner",
    "UnknownTask",
    "WorkerAlive",
]

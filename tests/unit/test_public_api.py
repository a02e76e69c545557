import tasklab
from tasklab import errors


def test_public_names_are_pinned():
    assert sorted(tasklab.__all__) == sorted(
        [
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
            "TaskApp",
            "Task",
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
    )
    for name in tasklab.__all__:
        assert hasattr(tasklab, name)


def test_error_codes_and_hierarchy():
    codes = {
        errors.UnknownTask: "unknown_task",
        errors.InvalidPayload: "invalid_payload",
        errors.IdempotencyConflict: "idempotency_conflict",
        errors.TaskNotFound: "not_found",
        errors.QueueFull: "queue_full",
        errors.WorkerAlive: "worker_alive",
        errors.LeaseLost: "lease_lost",
        errors.ShuttingDown: "shutting_down",
    }
    for cls, code in codes.items():
        assert cls.code == code
        assert issubclass(cls, errors.TasklabError)
    assert issubclass(errors.QueueFull, BufferError)
    assert not issubclass(errors.Cancelled, Exception)
    assert issubclass(errors.Cancelled, BaseException)


def test_states_are_strings():
    assert tasklab.State.QUEUED == "queued"
    assert isinstance(tasklab.State.SUCCEEDED, str)

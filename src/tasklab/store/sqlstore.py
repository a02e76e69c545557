"""`SqlStore`: the whole store contract for SQLite and PostgreSQL, one role per module
(store/shared/), over the dialect hooks of `SqlCore`. A dialect subclasses it."""

from __future__ import annotations

from tasklab.store.shared.core import SqlCore, lease_lost
from tasklab.store.shared.effects import SqlEffects
from tasklab.store.shared.leases import SqlLeases
from tasklab.store.shared.outbox import SqlOutbox
from tasklab.store.shared.queues import SqlQueues
from tasklab.store.shared.reads import SqlReads
from tasklab.store.shared.recovery import SqlRecovery
from tasklab.store.shared.retention import SqlRetention
from tasklab.store.shared.schedules import SqlSchedules
from tasklab.store.shared.search import SqlSearch
from tasklab.store.shared.submits import SqlSubmits
from tasklab.store.shared.waits import SqlWaits
from tasklab.store.shared.workers import SqlWorkers

__all__ = ["SqlCore", "SqlStore", "lease_lost"]


class SqlStore(
    SqlWaits,
    SqlSubmits,
    SqlReads,
    SqlSearch,
    SqlLeases,
    SqlQueues,
    SqlSchedules,
    SqlEffects,
    SqlRecovery,
    SqlOutbox,
    SqlRetention,
    SqlWorkers,
):
    """Every role; the dialect hooks (`SqlCore`) are the subclass's."""

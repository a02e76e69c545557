"""Settings, grouped: one object instead of many keyword arguments."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tasklab.core.policy import Backoff


@dataclass(frozen=True)
class Settings:
    lease: float = 30.0  # seconds a claim holds without a heartbeat
    drain_timeout: float = 10.0  # worker shutdown: let running tasks finish this long
    finalization: float = 5.0  # deadline for a terminal write after a cancellation
    process_grace: float = 5.0  # process runner: cancel -> terminate
    shutdown_grace: float = 2.0  # worker shutdown: after requesting cancellation
    flush_interval: float = 0.05  # chunk/progress coalescing
    flush_bytes: int = 4096
    backoff: Backoff = field(default_factory=Backoff)
    durability: str = "full"  # SQLite synchronous=FULL | NORMAL
    prune_every: float = 60.0  # retention (`--retain`): seconds between prunes

    @property
    def heartbeat_every(self) -> float:
        return self.lease / 3

    @property
    def local_lease(self) -> float:
        """How long an execution trusts its lease without a confirmed renewal: 80 % of
        the lease, counted from when the claiming or renewing statement was *sent* (by
        this process's monotonic clock, so never later than the database's
        `lease_until`). The other 20 % (6 s of the default 30) are the margin in which a
        task told to stop reaches its next checkpoint before any other worker can
        claim it: the reaper expires a lease only at `lease_until`, by the database's
        clock."""
        return self.lease * 0.8

    @property
    def lost_grace(self) -> float:
        """Process runner: a child whose execution lost its lease is terminated after
        this much (not the full process grace): inside the margin above."""
        return min(self.process_grace, self.lease * 0.1)

    @property
    def reap_every(self) -> float:
        return self.lease / 4

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        env: dict[str, object] = {}
        if "TASKLAB_LEASE" in os.environ:
            env["lease"] = float(os.environ["TASKLAB_LEASE"])
        env.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**env)  # type: ignore[arg-type]

"""Retention in the background: `--retain 7d` on `worker` and `serve` prunes terminal
tasks older than that every `Settings.prune_every` seconds (see `Engine.prune`).

Its own thread, so that a first prune of a large history never holds up claims; each
batch is one short transaction, and stopping waits for the batch in progress only.
Several processes may prune one store at once: a task is deleted once, the others find
nothing left of it.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

from tasklab.engine import as_engine
from tasklab.errors import TasklabError

if TYPE_CHECKING:
    from tasklab.engine import EngineLike

log = logging.getLogger("tasklab.retention")


class Retention:
    def __init__(self, app: EngineLike, keep: timedelta) -> None:
        if keep < timedelta(0):
            raise ValueError("retention must not be negative")
        self.engine = as_engine(app)
        self.keep = keep
        self.pruned = 0  # tasks, over this object's life
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Retention:
        self._thread = threading.Thread(target=self._loop, name="tasklab-retention", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._prune_once()
            self._stop.wait(self.engine.settings.prune_every)

    def _prune_once(self) -> None:
        done = 0
        try:
            for totals in self.engine.prune_batches(self.keep):
                done = totals["tasks"]
                if self._stop.is_set():
                    break
        except TasklabError as exc:
            log.warning("retention: %s", exc)
        self.pruned += done

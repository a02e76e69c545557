"""Three worker processes, each running the scheduler, and a schedule made by a
process that has exited: every tick makes exactly one task, none is missed."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from datetime import datetime

from tests.acceptance.test_limits import spawn, stop
from tests.acceptance.test_sigkill import ROOT, env
from tests.conftest import make_app
from tests.integration.test_schedules import made_by

MAKE = """
import sys
from tests.conftest import make_app
app = make_app(sys.argv[1])
app.schedule("every-second", "t.echo", every=1, payload={"value": 7})
app.close()
"""


def test_three_schedulers_one_task_per_tick_from_a_schedule_whose_maker_exited(store_url):
    made = subprocess.run(
        [sys.executable, "-c", MAKE, store_url], cwd=ROOT, env=env(), capture_output=True, text=True
    )
    assert made.returncode == 0, made.stderr
    workers = [spawn(store_url) for _ in range(3)]
    try:
        time.sleep(4.5)
    finally:
        assert stop(workers) == [0, 0, 0]
    app = make_app(store_url)
    tasks = made_by(app, "every-second")
    keys = sorted(t.idempotency_key for t in tasks)
    assert len(keys) == len(set(keys)) >= 3
    ticks = [datetime.fromisoformat(k.split(":", 2)[2].replace("Z", "+00:00")) for k in keys]
    gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(ticks)}
    assert gaps == {1.0}, keys  # consecutive: no tick missed, none twice
    assert all(app.query(t.id).result == 7 for t in tasks if app.query(t.id).terminal)
    app.close()

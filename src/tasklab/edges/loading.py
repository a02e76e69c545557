"""Building a TaskApp from command-line options (`--db`, `--app module:attr`)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from tasklab.app import TaskApp
from tasklab.config import Settings


def load_app(
    db: str, app_spec: str | None, *, data_dir: str | None = None, **settings: Any
) -> TaskApp:
    """A TaskApp on `db` with the built-in tasks and, with `--app module:attr`, the
    tasks that module's TaskApp registered (the user's app is never opened)."""
    app = TaskApp(db, settings=Settings.from_env(**settings), data_dir=data_dir)
    if app_spec:
        for task in user_app(app_spec).registry.all():
            app.registry.add(task)
    return app


def user_app(spec: str) -> TaskApp:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--app takes module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r} for --app: {exc}") from None
    found = getattr(module, attr, None)
    if not isinstance(found, TaskApp):
        raise ValueError(f"{spec!r} is not a tasklab.TaskApp")
    return found

"""The `tasklab` command. Every command takes `--db` and `--app` after its name;
every command that prints a task takes `--json`. Errors: one line on stderr, non-zero
exit (2 for bad input, 1 for everything else). One module per group of commands."""

from __future__ import annotations

import importlib
import sys

from tasklab.edges.cli.common import cli, parse_age

# each module registers its commands on `cli`, in the order `--help` lists them
for _group in ("tasks", "operations", "run", "queues", "webhooks", "bench"):
    importlib.import_module(f"tasklab.edges.cli.{_group}")


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["cli", "main", "parse_age"]

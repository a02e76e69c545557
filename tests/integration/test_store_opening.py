"""Opening a store on something that is not one: a StoreError that says what and where,
nothing of the half-opened store left open (a socket left for the garbage collector
surfaced in CI as a ResourceWarning in whichever test ran next), and from the CLI a
message and a non-zero exit, not a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasklab.errors import StoreError
from tasklab.store import open_store
from tests.acceptance.test_sigkill import cli


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _not_a_database(tmp_path: Path) -> Path:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    return path


def _a_directory(tmp_path: Path) -> Path:
    path = tmp_path / "a-directory.db"
    path.mkdir()
    return path


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
@pytest.mark.parametrize(
    ("make", "says"),
    [(_not_a_database, "file is not a database"), (_a_directory, "unable to open")],
)
def test_a_path_that_is_no_database_is_a_store_error_and_leaves_nothing_open(tmp_path, make, says):
    path = make(tmp_path)
    before = _open_fds()
    # the error's traceback keeps the half-opened store alive: whatever it still had
    # open would show here, not only at some later garbage collection
    with pytest.raises(StoreError, match=says) as raised:
        open_store(f"sqlite:///{path}")
    assert str(path) in str(raised.value)
    assert _open_fds() - before == set()
    if path.is_file():  # and nothing was written into it
        assert path.read_text().startswith("these are my notes")


def test_the_cli_on_a_file_that_is_not_a_database_says_so(tmp_path):
    path = _not_a_database(tmp_path)
    for args in (
        ["status", "0123"],
        ["stats"],
        ["submit", "wordfreq", "--payload", '{"text": "a b"}'],
    ):
        out = cli(*args, "--db", f"sqlite:///{path}", check=False)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        assert "not a database" in out.stderr and str(path) in out.stderr
        assert "Traceback" not in out.stderr + out.stdout

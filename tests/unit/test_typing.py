"""Typed task handles are checked by mypy (issue 17): the typed example passes, and
each deliberate wrong call in tests/typing/wrong_calls.py is refused at its line —
the wrong argument type, a missing argument, an unknown keyword, and using a result
as the wrong type (for a sync and an async task)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mypy(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_typed_example_passes_and_each_wrong_call_is_refused():
    assert _mypy("tests/typing/typed_example.py").returncode == 0
    out = _mypy("tests/typing/wrong_calls.py")
    assert out.returncode == 1, out.stdout
    errors = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"wrong_calls\.py:(\d+): error: (.*)", out.stdout)
    }
    assert sorted(errors) == [7, 8, 9, 10, 11], out.stdout
    assert 'has incompatible type "str"; expected "int"' in errors[7]
    assert 'Missing positional argument "email"' in errors[8]
    assert 'Unexpected keyword argument "colour"' in errors[9]
    assert '"dict[str, int]", variable has type "str"' in errors[10]
    assert '"float", variable has type "str"' in errors[11]

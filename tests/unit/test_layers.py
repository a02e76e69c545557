"""The direction of imports: the execution machinery never reaches up to the facade.

Runners, services, the execution, monitor, finisher and engine modules take an
`Engine`; `TaskApp` (tasklab.app) is built on them, never the other way round — also
not under `TYPE_CHECKING`. The core imports no I/O at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tasklab"
BELOW_THE_FACADE = [
    *sorted((SRC / "runners").glob("*.py")),
    *sorted((SRC / "service").glob("*.py")),
    *(
        SRC / name
        for name in (
            "engine.py",
            "execution.py",
            "monitor.py",
            "finisher.py",
            "submitter.py",
            "groupcommit.py",
        )
    ),
]
IO_MODULES = {"sqlite3", "psycopg", "psycopg_pool", "socket", "asyncio", "httpx", "fastapi"}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", BELOW_THE_FACADE, ids=lambda p: p.name)
def test_nothing_below_the_facade_imports_it(path):
    assert "tasklab.app" not in imported(path), f"{path.name} reaches up to TaskApp"


@pytest.mark.parametrize("path", sorted((SRC / "core").glob("*.py")), ids=lambda p: p.name)
def test_the_core_does_no_io(path):
    roots = {name.split(".")[0] for name in imported(path)}
    assert not roots & IO_MODULES, f"core/{path.name} imports {roots & IO_MODULES}"


EDGES = [*sorted((SRC / "edges").rglob("*.py")), SRC / "metrics.py"]


@pytest.mark.parametrize("path", EDGES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_edge_reaches_into_the_store(path):
    """The edges use the facade (`TaskApp`), never its store: what they need of it is
    a method of the facade."""
    reads = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "store"
    ]
    assert reads == [], f"{path.name} reads .store at lines {reads}"


def imported_names(path: Path, module_prefix: str) -> set[str]:
    return {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(module_prefix)
        for alias in node.names
    }


# who may name the whole store contract: its owner (the engine), the facade that hands
# it to users (`app.store`), and the stores themselves
WHOLE_STORE_ALLOWED = {"engine.py", "app.py"}


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(SRC.rglob("*.py")) if SRC / "store" not in p.parents],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_consumers_name_the_store_roles_they_use(path):
    """A consumer of the store names its roles (`Leases`, `Outbox`, … in
    store/roles.py), not the 45-method union: a new capability then shows in the
    import lines which part of the store it touches."""
    if path.name in WHOLE_STORE_ALLOWED and path.parent == SRC:
        return
    assert "Store" not in imported_names(path, "tasklab.store"), (
        f"{path.relative_to(SRC)} imports the whole Store contract; name its roles"
    )


def test_each_store_role_module_is_small():
    """The SQL store is split by role: no module of store/ grows past ~400 lines."""
    sizes = {
        str(p.relative_to(SRC)): len(p.read_text().splitlines())
        for p in (SRC / "store").rglob("*.py")
    }
    assert max(sizes.values()) <= 400, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]

"""The layering rule of ADR 0018, enforced on the import graph.

Each package of ``relay_es`` may import only the packages below it, and only ``adapters`` and
``composition`` may import the libraries that do I/O. Every import counts, including those
inside functions and under ``TYPE_CHECKING``: a layer that needs a name from above for a type
annotation is a layer that knows too much.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "relay_es"

# What each layer may import of Relay's own packages (itself included).
ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "aggregates": {"domain", "aggregates"},
    "protocol": {"domain", "aggregates", "protocol"},
    "projections": {"domain", "aggregates", "protocol", "projections"},
    "engine": {"domain", "aggregates", "protocol", "projections", "engine"},
    "adapters": {"domain", "aggregates", "protocol", "projections", "engine", "adapters"},
    "composition": {"domain", "aggregates", "protocol", "projections", "engine", "adapters", "composition"},
}
LAYERS = list(ALLOWED)

# Libraries that do I/O (stores, sockets, servers, metrics exposition): adapters and composition only.
IO_LIBRARIES = {"psycopg", "psycopg_pool", "sqlite3", "websockets", "uvicorn", "litestar", "prometheus_client",
                "socket", "http", "urllib", "subprocess", "asyncio"}
IO_LAYERS = {"adapters", "composition"}
# Modules of those libraries that only parse (no I/O): any layer may use them.
PURE_MODULES = {"urllib.parse"}
# The library's persistence layer is I/O; its domain and application layers are what the
# pure layers are written in.
IO_MODULES = {"eventsourcing.postgres", "eventsourcing.sqlite"}


def modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py"))


def layer_of(path: Path, package: Path = PACKAGE) -> str | None:
    rel = path.relative_to(package).parts
    return rel[0] if len(rel) > 1 else None


MODULE_NAME = re.compile(r"^relay_es(\.[a-z_]+)+$")


def imports(path: Path, package: Path = PACKAGE) -> list[str]:
    """Relay and library modules ``path`` imports, and Relay modules it names in a string
    (``importlib.import_module("relay_es.…")`` is an import the ``import`` statement hides)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    pkg = ".".join(("relay_es",) + path.relative_to(package).parts[:-1])
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out += [f"{mod}.{a.name}" for a in node.names if mod == "relay_es"]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.match(node.value):
            out.append(node.value)
    return out


SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|CREATE\s+(UNIQUE\s+)?(TABLE|INDEX)|DELETE\s+FROM|UPDATE\s+\w+\s+SET|DROP\s+TABLE)\b",
                 re.IGNORECASE | re.DOTALL)


def sql_strings(path: Path) -> list[str]:
    """String constants in ``path`` that are SQL statements."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and SQL.search(n.value)
            and not n.value.lstrip().startswith(("The ", "A ", "An "))]  # prose in docstrings is not SQL


def violations(package: Path = PACKAGE) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in modules(package):
        layer = layer_of(path, package)
        rel = str(path.relative_to(package.parent))
        for mod in imports(path, package):
            parts = mod.split(".")
            if parts[0] == "relay_es":
                if len(parts) < 2 or parts[1] not in ALLOWED:
                    continue  # relay_es itself (its version) or relay_es.__main__
                if layer is None:
                    continue  # relay_es/__init__.py and __main__.py: the entry points
                if parts[1] not in ALLOWED[layer]:
                    found.add((rel, mod))
            elif layer is not None and layer not in IO_LAYERS and mod not in PURE_MODULES:
                if parts[0] in IO_LIBRARIES or any(mod == m or mod.startswith(m + ".") for m in IO_MODULES):
                    found.add((rel, mod))
        if layer is not None and layer not in IO_LAYERS and sql_strings(path):
            found.add((rel, "SQL"))
    return found


def test_every_module_is_in_a_layer() -> None:
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert sorted(top) == ["__init__.py", "__main__.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)


def test_no_layer_imports_above_itself() -> None:
    new = violations()
    assert not new, "imports that break the layering rule (docs/adr/0018-layers.md):\n" + "\n".join(
        f"  {m} imports {i}" for m, i in sorted(new))


def test_the_checker_sees_a_violation() -> None:
    """The rule can fail: an engine module importing an adapter, a projection carrying SQL,
    and a lower layer naming a higher module in a string (``importlib``) are all caught."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        fake = Path(d) / "relay_es"
        (fake / "engine").mkdir(parents=True)
        (fake / "projections").mkdir()
        (fake / "engine" / "bad.py").write_text("from relay_es.adapters.stores import open_database\n")
        (fake / "projections" / "sql.py").write_text('Q = "SELECT id FROM relay_executors"\n')
        (fake / "projections" / "sneaky.py").write_text(
            'import importlib\nX = importlib.import_module("relay_es.adapters.failures")\n')
        found = violations(fake)
    assert found == {("relay_es/engine/bad.py", "relay_es.adapters.stores"),
                     ("relay_es/projections/sql.py", "SQL"),
                     ("relay_es/projections/sneaky.py", "relay_es.adapters.failures")}


# Modules tested only through others, and why. Everything else has tests/<layer>/test_<module>.py.
UNMIRRORED: dict[str, str] = {
}


def test_tests_mirror_the_tree() -> None:
    """``relay_es/<layer>/<module>.py`` is tested by ``tests/<layer>/test_<module>.py``."""
    missing = []
    for path in modules():
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) < 2 or rel.name == "__init__.py":
            continue
        test = ROOT / "tests" / rel.parent / f"test_{rel.name}"
        if not test.exists() and str(rel) not in UNMIRRORED:
            missing.append(f"relay_es/{rel} has no {test.relative_to(ROOT)}")
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("path", [pytest.param(p, id=str(p.relative_to(ROOT))) for p in modules()])
def test_module_imports_resolve(path: Path) -> None:
    """Every import of Relay's own modules names a module that exists (a stale path after a move fails here)."""
    for mod in imports(path):
        parts = mod.split(".")
        if parts[0] != "relay_es":
            continue
        target = PACKAGE.joinpath(*parts[1:])
        parent = PACKAGE.joinpath(*parts[1:-1])
        assert (target.with_suffix(".py").exists() or (target / "__init__.py").exists()
                or parent.with_suffix(".py").exists() or (parent / "__init__.py").exists()), f"{mod} does not exist"

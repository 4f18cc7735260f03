"""The package's shape: sub-packages by concern, no import cycles, no private names taken across modules,
small modules, and only documented interfaces of SQLite (no map of its shared-memory file)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "buildreport"
MAX_LINES = 500
# Generated data, not logic: the sample's tables of packages, systems and messages.
LONG_ALLOWED = {"buildreport.sample"}
SUB_PACKAGES = ("http", "store", "store.sqlite", "store.postgres", "record", "insights", "cli", "events", "imports")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """(module, name) for each `from M import N` and `import M` of the package in `path`, wherever it stands
    (at the top, in a function, under TYPE_CHECKING): each is a dependency the reader of the code must follow."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base == "buildreport" or base.startswith("buildreport."):
                for alias in node.names:
                    yield base, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("buildreport"):
                    yield alias.name, ""


def dependencies(known: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for base, item in imported(name, path, known):
            target = f"{base}.{item}" if f"{base}.{item}" in known else base
            if target in known and target != name:
                graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_loop_of_three_and_nothing_in_a_tree() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_has_no_import_cycles() -> None:
    assert cycles(dependencies(modules())) == []


def test_no_module_imports_another_modules_private_names() -> None:
    known = modules()
    taken = [
        f"{name} takes {base}.{item}"
        for name, path in known.items()
        for base, item in imported(name, path, known)
        if item.startswith("_") and not item.startswith("__") and f"{base}.{item}" not in known
    ]
    assert taken == []


@pytest.mark.parametrize("name", sorted(set(modules()) - LONG_ALLOWED))
def test_module_is_at_most_500_lines(name: str) -> None:
    assert len(modules()[name].read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("sub", SUB_PACKAGES)
def test_each_concern_has_its_sub_package(sub: str) -> None:
    assert (PACKAGE / sub.replace(".", "/") / "__init__.py").is_file()


def test_the_flat_package_holds_only_shared_core_modules() -> None:
    """Everything that serves one face lives in that face's sub-package; the top level keeps what several share."""
    top = sorted(path.stem for path in PACKAGE.glob("*.py"))
    assert len(top) <= 24, top


def test_nothing_maps_sqlite_files_or_reads_their_private_formats() -> None:
    """SQLite leaves the WAL index (-shm) and the WAL format to itself; the package reads neither."""
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        imports = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        froms = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "mmap" not in imports | froms, name

"""The package's layers (docs/architecture.md): each module imports only its own layer and those
below it, the packages form no cycle, Ray stays in ``search``, YAML is parsed only in ``target``,
and no signature passes hardware, a target or a workload as ``Any``.

Imports are read from the source with ``ast`` (those inside functions too), so a lazy import
cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tensorsearch"

# bottom to top; packages on one floor may import each other (without a cycle)
FLOORS = [
    {"ir"},
    {"arith"},
    {"script"},
    {"target"},
    {"te", "interpreter", "transform", "workloads"},
    {"schedule"},
    {"lower"},
    {"codegen"},
    {"runtime"},
    {"graph"},
    {"search"},
    {"cli"},
]
# the public spellings (``tensorsearch.hardware``, ``tensorsearch.intrin``, the package root):
# they re-export the layers and nothing inside the package may import them
FACADES = {"<root>", "__main__", "hardware", "intrin"}
FLOOR_OF = {pkg: n for n, floor in enumerate(FLOORS) for pkg in floor} | {f: len(FLOORS) for f in FACADES}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, relative ones resolved."""
    is_init = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if is_init else -1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            if node.module is None:  # ``from . import x``: x may be a module
                found += [(f"{stem}.{a.name}", node.lineno) for a in node.names]
            else:
                found.append((stem, node.lineno))
    return found


MODULES = _modules()
IMPORTS = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_package_has_a_floor():
    unknown = sorted({_package(m) for m in MODULES} - set(FLOOR_OF))
    assert not unknown, f"packages with no layer in tests/test_layers.py: {unknown}"


def test_no_module_imports_a_later_layer():
    bad = []
    for module, imports in IMPORTS.items():
        mine = _package(module)
        for target, line in imports:
            if not target.startswith("tensorsearch.") and target != "tensorsearch":
                continue
            theirs = _package(target)
            if theirs == mine:
                continue
            if theirs in FACADES and mine not in FACADES:
                bad.append(f"{MODULES[module].name}:{line} {module} imports the public facade {target}")
            elif FLOOR_OF[theirs] > FLOOR_OF[mine]:
                bad.append(f"{module}:{line} ({mine}) imports {target} ({theirs}, a later layer)")
    assert not bad, "\n".join(bad)


def test_packages_form_no_cycle():
    edges: dict[str, set[str]] = {}
    for module, imports in IMPORTS.items():
        for target, _ in imports:
            if target.startswith("tensorsearch.") and _package(target) != _package(module):
                edges.setdefault(_package(module), set()).add(_package(target))

    def cycle_from(start: str, node: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(edges.get(node, ())):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path and (found := cycle_from(start, nxt, [*path, nxt])):
                return found
        return None

    for pkg in sorted(edges):
        found = cycle_from(pkg, pkg, [pkg])
        assert found is None, f"package import cycle: {' -> '.join(found)}"


@pytest.mark.parametrize(
    ("library", "allowed"), [("ray", {"search"}), ("yaml", {"target"})], ids=["ray-in-search", "yaml-in-target"]
)
def test_library_stays_in_its_layer(library, allowed):
    bad = [
        f"{module}:{line} imports {name}"
        for module, imports in IMPORTS.items()
        for name, line in imports
        if name.split(".")[0] == library and _package(module) not in allowed
    ]
    assert not bad, "\n".join(bad)


HARDWARE_LIKE = {"hardware", "hw", "target", "workload", "func_or_workload"}


@pytest.mark.slow
def test_no_hardware_target_or_workload_passed_as_any():
    bad = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.arg in HARDWARE_LIKE and arg.annotation is not None and ast.unparse(arg.annotation) == "Any":
                    bad.append(f"{module}:{node.lineno} {node.name}({arg.arg}: Any)")
    assert not bad, "\n".join(bad)


def test_the_test_sees_lazy_imports(tmp_path):
    source = "def f():\n    from ..search import tune\n"
    path = tmp_path / "x.py"
    path.write_text(source)
    assert _imports("tensorsearch.target.x", path) == [("tensorsearch.search", 2)]


# --- modules: cycles between files, and private names ------------------------------------------

REPO = PACKAGE.parent
# cycles allowed as they are, each entry one cycle's files. The nodes print through the printer
# (``str(node)``), which imports the nodes (and the functor it dispatches with): the printer is
# imported when a node is first printed.
KNOWN_CYCLES = [
    {"tensorsearch.ir.expr", "tensorsearch.ir.functor", "tensorsearch.ir.printer", "tensorsearch.ir.stmt"},
]
# where an import of another module's private name (``from x import _name``) is refused: the
# whole package, and the tests and experiments that import it
PRIVATE_SCOPE = ("tensorsearch",)


def _import_edges(module: str, path: Path) -> list[tuple[str, int, bool, list[str]]]:
    """(imported module, line, inside a function, names) for every import of the file that runs
    (not those under ``if TYPE_CHECKING``): ``from x import y`` names the module ``x.y`` when
    there is one, else ``x`` (relative ones resolved)."""
    is_init = path.name == "__init__.py"
    found: list[tuple[str, int, bool, list[str]]] = []

    def visit(node: ast.AST, local: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((a.name, node.lineno, local, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            if node.level:
                base = module.split(".")[: None if is_init else -1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [a.name for a in node.names]
            subs = [f"{stem}.{n}" for n in names if f"{stem}.{n}" in MODULES]
            found.extend((s, node.lineno, local, []) for s in subs)
            if len(subs) < len(names):
                found.append((stem, node.lineno, local, [n for n in names if f"{stem}.{n}" not in MODULES]))
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            return  # for the type checker only: nothing is imported when the program runs
        inner = local or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


EDGES = {m: _import_edges(m, p) for m, p in MODULES.items()}


def _cycles(with_local: bool) -> list[list[str]]:
    """The strongly connected components of more than one file (Tarjan), of the imports made when a
    file is loaded, or of every import (``with_local``: those inside functions too)."""
    graph = {
        m: sorted({t for t, _, local, _ in edges if t in MODULES and t != m and (with_local or not local)})
        for m, edges in EDGES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                out.append(sorted([*comp, v]))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [c for c in out if not any(set(c) <= known for known in KNOWN_CYCLES)]


def _describe(cycle: list[str]) -> str:
    inside = set(cycle)
    lines = [
        f"  {m}:{line} imports {t}{' (inside a function)' if local else ''}"
        for m in cycle
        for t, line, local, _ in EDGES[m]
        if t in inside and t != m
    ]
    return "files importing each other: " + ", ".join(cycle) + "\n" + "\n".join(lines)


def test_files_form_no_import_cycle():
    """A module's imports at load time never lead back to it: a cycle makes the import order
    matter and splits one concern over two files."""
    found = _cycles(with_local=False)
    assert not found, "\n".join(_describe(c) for c in found)


def test_no_import_inside_a_function_hides_a_cycle():
    """An import moved into a function still ties the two files together: with those imports
    counted too, the files form no cycle."""
    found = _cycles(with_local=True)
    assert not found, "\n".join(_describe(c) for c in found)


def _private_imports(module: str, edges: list[tuple[str, int, bool, list[str]]]) -> list[str]:
    return [
        f"{module}:{line} imports {name} from {target}"
        for target, line, _, names in edges
        for name in names
        if name.startswith("_") and not name.endswith("__") and target.startswith("tensorsearch") and target != module
    ]


def test_the_search_imports_no_private_name_of_another_module():
    bad = [b for m, e in EDGES.items() if m.startswith(PRIVATE_SCOPE) for b in _private_imports(m, e)]
    assert not bad, "\n".join(bad)


def test_tests_and_experiments_import_no_private_name_of_the_search():
    bad = []
    for path in sorted([*(REPO / "tests").glob("*.py"), *(REPO / "experiments").glob("*.py")]):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        edges = _import_edges(module, path)
        bad += [b for b in _private_imports(module, edges) if b.split(" from ")[1].startswith(PRIVATE_SCOPE)]
    assert not bad, "\n".join(bad)


def test_the_cycle_test_sees_a_cycle_hidden_in_a_function(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from .y import a\n\ndef f():\n    from . import z\n    from .w import _b\n")
    edges = _import_edges("tensorsearch.search.x", path)
    assert ("tensorsearch.search.y", 1, False, ["a"]) in edges
    assert ("tensorsearch.search.w", 5, True, ["_b"]) in edges
    assert _private_imports("tensorsearch.search.x", edges) == [
        "tensorsearch.search.x:5 imports _b from tensorsearch.search.w"
    ]


def test_no_function_is_longer_than_150_lines():
    """A function reads at once: a long primitive is split into its check, compute and rewrite steps."""
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 150:
                long.append(f"{module}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, "\n".join(long)


# --- target kinds: one strategy per kind, looked up in one registry per layer -----------------

# the only modules that may name a kind: each holds a table of per-kind strategies looked up once
# by ``hardware.kind`` (target's schema of each kind, runtime's Backend, the search's SearchKind)
KIND_REGISTRIES = {"tensorsearch.target.hardware", "tensorsearch.runtime.backend", "tensorsearch.search.space.kind"}
KINDS = {"cpu", "gpu"}


def _kind_branches(tree: ast.AST) -> list[int]:
    """Lines that compare something with a kind name (``hw.kind == "gpu"``, ``kind != "cpu"``,
    ``value in ("cpu", "gpu")``)."""

    def names_kind(e: ast.expr) -> bool:
        if isinstance(e, ast.Constant):
            return e.value in KINDS
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            return any(names_kind(x) for x in e.elts)
        return False

    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare) and any(map(names_kind, [n.left, *n.comparators]))
    ]


def test_only_the_kind_registries_branch_on_a_kind():
    """Behaviour that differs between CPUs and GPUs comes from the kind's strategy object
    (``runtime.backend.backend_for``, ``search.space.kind.search_kind_for``), never from a
    comparison with a kind name elsewhere."""
    found = [
        f"{path}:{line}"
        for module, path in _modules().items()
        if module not in KIND_REGISTRIES
        for line in _kind_branches(ast.parse(path.read_text()))
    ]
    assert not found, "kind branches outside the kind registries:\n" + "\n".join(found)


def test_the_kind_test_sees_a_kind_branch():
    tree = ast.parse('if hw.kind == "gpu":\n    pass\nok = "gpu" + x\nif value not in ("cpu", "gpu"):\n    pass\n')
    assert _kind_branches(tree) == [1, 4]
    assert set(KIND_REGISTRIES) <= set(_modules())

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

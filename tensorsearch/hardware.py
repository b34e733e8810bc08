"""Hardware descriptions: what a program is compiled for and tuned to.

A descriptor is a small YAML file (``hardware/<name>.yaml`` at the repository root)::

    name: x86-znver4
    kind: cpu                      # "cpu" or "gpu"
    triple: x86_64-unknown-linux-gnu
    cpu: znver4                    # LLVM CPU name
    features: [+avx2, +fma, +avx512f, +avx512vnni]   # LLVM target features, "+x" or "-x"
    cores: 2
    vector_bits: 512               # widest SIMD register
    caches: {l1d: 32 KiB, l2: 1 MiB, l3: 32 MiB}      # bytes: an integer, or a number with K/KiB/M/MiB/G/GiB
    intrinsics: [x86-avx512-vnni]  # optional: intrinsic sets offered (intrinsics/<set>.yaml)
    gpu: {...}                     # required for kind gpu, forbidden for cpu (see _GPU_FIELDS)
    description: free text         # optional

For a GPU, ``cores`` counts streaming multiprocessors, ``caches.l3`` may be omitted, and ``gpu``
gives the compute capability, warp size, thread/block limits, shared memory, registers and the
memory scopes. ``intrinsics`` names intrinsic sets (``tensorsearch.intrin``); each is loaded,
validated, checked against this target (architecture, features, compute capability, scopes) and
exposed as :attr:`Hardware.intrinsic_sets` / :attr:`Hardware.intrinsics`. The full schema is in
docs/hardware-yaml.md.

YAML is read in exactly one place (:func:`read_yaml`, through ``yaml.safe_load``; the intrinsic
files of ``tensorsearch.intrin`` are read through it too); :func:`parse` builds the frozen,
hashable :class:`Hardware` dataclass, so a descriptor can key caches of compiled modules. Every
mistake raises :class:`HardwareError` naming the file, the key path (``caches.l2``), what was
expected and what was found; unknown keys are errors too (listing the known ones), so a typo never
silently falls back to a default. The schema is a table (:data:`_FIELDS`, :data:`_CACHE_FIELDS`) of
parsers, so later issues (intrinsic sets, GPU fields) add rows rather than code paths.

:func:`load` takes a :class:`Hardware` (returned as is), ``"host"`` (see :func:`host`), a path to a
YAML file, or a shipped descriptor's name. Names are looked up, in order, in the directories of the
``TENSORSEARCH_HARDWARE_PATH`` environment variable (``os.pathsep``-separated), in ``hardware/``
next to the package (a source checkout or an editable install), and in
``<sys.prefix>/share/tensorsearch/hardware`` (where a wheel installs them as data files; see
:func:`search_path`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "GPU",
    "Caches",
    "Hardware",
    "HardwareError",
    "HardwareWarning",
    "available",
    "host",
    "load",
    "parse",
    "read_yaml",
    "search_path",
]


class HardwareError(ValueError):
    """A hardware descriptor that cannot be found or is malformed.

    ``source`` is the file (or ``"<string>"``), ``key`` the dotted key path ("" for the whole
    document), ``expected`` and ``found`` describe the mistake.
    """

    def __init__(self, source: str, key: str, expected: str, found: Any = None, *, message: str | None = None):
        self.source = source
        self.key = key
        self.expected = expected
        self.found = found
        where = f"{source}: {key}" if key else source
        text = message if message is not None else f"expected {expected}, found {_describe(found)}"
        super().__init__(f"{where}: {text}")


class HardwareWarning(UserWarning):
    """The host CPU matches no shipped descriptor, so one was derived from what the CPU reports."""


def _describe(value: Any) -> str:
    if value is _MISSING:
        return "nothing (the key is missing)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


_MISSING = object()


@dataclass(frozen=True)
class Caches:
    """Data cache sizes in bytes, per core for L1d and L2, per (shared) L3 slice for L3."""

    l1d: int
    l2: int
    l3: int = 0  # 0: none (GPUs); required for CPUs


@dataclass(frozen=True)
class GPU:
    """The GPU part of a descriptor (``gpu:``); sizes in bytes, counts per block unless named."""

    compute_capability: tuple[int, int]
    warp_size: int
    max_threads_per_block: int
    max_shared_memory_per_block: int
    registers_per_block: int
    registers_per_thread: int
    memory_scopes: tuple[str, ...]
    max_threads_per_sm: int | None = None
    max_shared_memory_per_block_optin: int | None = None
    shared_memory_per_sm: int | None = None

    @property
    def sm(self) -> str:
        """The architecture name nvcc and LLVM use: ``sm_86`` for compute capability 8.6."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass(frozen=True)
class SearchSpec:
    """The ``search:`` section: schedule rules (name, parameters) in the order they apply.

    Names and parameters are those of ``tensorsearch.search.space.RULES``; an empty tuple means
    the defaults for the descriptor's kind."""

    rules: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()


@dataclass(frozen=True)
class Hardware:
    """A validated hardware descriptor; frozen and hashable."""

    name: str
    kind: str
    triple: str
    cpu: str
    features: tuple[str, ...]
    cores: int
    vector_bits: int
    caches: Caches
    description: str = ""
    source: str | None = field(default=None, compare=False)
    note: str | None = field(default=None, compare=False)
    gpu: GPU | None = None
    intrinsic_sets: tuple[Any, ...] = ()  # tensorsearch.intrin.IntrinsicSet, in the order listed
    search: SearchSpec | None = None  # the ``search:`` section: the auto-scheduler's rules

    @property
    def intrinsics(self) -> tuple[Any, ...]:
        """Every intrinsic (``tensorsearch.intrin.Intrinsic``) of the offered sets, in order."""
        return tuple(i for s in self.intrinsic_sets for i in s.intrinsics)

    def intrinsic(self, name: str) -> Any:
        """The offered intrinsic called ``name``; KeyError listing the offered ones otherwise."""
        for i in self.intrinsics:
            if i.name == name:
                return i
        offered = ", ".join(i.name for i in self.intrinsics) or "(none)"
        raise KeyError(f"hardware {self.name} offers no intrinsic {name!r}; it offers: {offered}")

    @property
    def memory_scopes(self) -> tuple[str, ...]:
        """Storage scopes buffers may live in: the GPU's list, or ("global", "local") on a CPU."""
        return self.gpu.memory_scopes if self.gpu is not None else ("global", "local")

    @property
    def feature_string(self) -> str:
        """The features joined with commas, as LLVM's ``create_target_machine(features=...)`` wants."""
        return ",".join(self.features)

    @property
    def arch(self) -> str:
        """The triple's architecture component (``x86_64``, ``aarch64``, ...)."""
        return self.triple.split("-", 1)[0]

    def has_feature(self, name: str) -> bool:
        """Whether ``+name`` (the leading ``+`` is optional) is among the enabled features."""
        return ("+" + name.lstrip("+")) in self.features

    def vector_lanes(self, bits_per_element: int) -> int:
        """How many elements of that width fit in one vector register (at least 1)."""
        return max(1, self.vector_bits // bits_per_element)


# --------------------------------------------------------------------------------------------
# The schema: one parser per key. A parser gets (value, ctx) and returns the field's value or
# raises HardwareError through ctx.fail. Later issues extend these tables.


class _Ctx:
    """Where a value sits (file and key path) and which error class reports mistakes there."""

    def __init__(self, source: str, key: str, error: type[HardwareError] = HardwareError):
        self.source = source
        self.key = key
        self.error = error

    def child(self, key: str) -> _Ctx:
        sub = f"{self.key}.{key}" if self.key and not key.startswith("[") else self.key + key
        return _Ctx(self.source, sub, self.error)

    def fail(self, expected: str, found: Any) -> HardwareError:
        return self.error(self.source, self.key, expected, found)

    def message(self, text: str, found: Any = None) -> HardwareError:
        """An error whose whole message (after ``file: key:``) is ``text``."""
        return self.error(self.source, self.key, "", found, message=text)


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CPU_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_FEATURE_RE = re.compile(r"^[+-][A-Za-z0-9][A-Za-z0-9._-]*$")
_TRIPLE_RE = re.compile(r"^([a-z0-9_]+)-([a-z0-9_]+)-([a-z0-9_]+)(-[a-z0-9_]+)?$")
_KNOWN_ARCHES = (
    "x86_64",
    "i386",
    "i686",
    "aarch64",
    "aarch64_be",
    "arm64",
    "armv7",
    "riscv64",
    "riscv32",
    "powerpc64le",
    "powerpc64",
    "s390x",
    "wasm32",
    "wasm64",
    "nvptx64",
    "nvptx",
    "amdgcn",
)
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|K|KB|KiB|M|MB|MiB|G|GB|GiB)?\s*$")
_SIZE_UNITS = {None: 1, "B": 1, "K": 1024, "KB": 1024, "KiB": 1024, "M": 1024**2, "MB": 1024**2, "MiB": 1024**2}
_SIZE_UNITS.update({"G": 1024**3, "GB": 1024**3, "GiB": 1024**3})


def _string(pattern: re.Pattern[str], what: str) -> Callable[[Any, _Ctx], str]:
    def parse_string(value: Any, ctx: _Ctx) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ctx.fail(what, value)
        return value

    return parse_string


def _kind(value: Any, ctx: _Ctx) -> str:
    if value not in ("cpu", "gpu"):
        raise ctx.fail('"cpu" or "gpu"', value)
    return value


def _triple(value: Any, ctx: _Ctx) -> str:
    expected = f"an LLVM target triple arch-vendor-os[-env] with arch one of {', '.join(_KNOWN_ARCHES)}"
    if not isinstance(value, str):
        raise ctx.fail(expected, value)
    m = _TRIPLE_RE.match(value)
    if m is None or m.group(1) not in _KNOWN_ARCHES:
        raise ctx.fail(expected, value)
    return value


def _features(value: Any, ctx: _Ctx) -> tuple[str, ...]:
    expected_item = 'an LLVM feature "+name" or "-name" (letters, digits, ".", "_", "-")'
    if isinstance(value, str):  # "+neon,+dotprod" is accepted too
        items: list[Any] = [s.strip() for s in value.split(",")] if value.strip() else []
    elif isinstance(value, list):
        items = value
    else:
        raise ctx.fail("a list of LLVM features such as [+avx2, +fma] (or one comma-separated string)", value)
    out: list[str] = []
    for i, item in enumerate(items):
        sub = ctx.child(f"[{i}]") if isinstance(value, list) else ctx
        if not isinstance(item, str) or not _FEATURE_RE.match(item):
            raise sub.fail(expected_item, item)
        if item in out:
            raise sub.fail("each feature once", item)
        if ("-" if item[0] == "+" else "+") + item[1:] in out:
            raise sub.fail(f"a feature not also given with the opposite sign ({item[1:]})", item)
        out.append(item)
    return tuple(out)


def _positive_int(what: str) -> Callable[[Any, _Ctx], int]:
    def parse_int(value: Any, ctx: _Ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ctx.fail(what, value)
        return value

    return parse_int


def _vector_bits(value: Any, ctx: _Ctx) -> int:
    expected = "a power of two between 32 and 4096 (the widest SIMD register in bits)"
    if isinstance(value, bool) or not isinstance(value, int) or not 32 <= value <= 4096 or value & (value - 1):
        raise ctx.fail(expected, value)
    return value


def _size(value: Any, ctx: _Ctx) -> int:
    expected = "a positive size in bytes: an integer, or a number with a unit (K, KiB, M, MiB, G, GiB)"
    if isinstance(value, bool):
        raise ctx.fail(expected, value)
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (m := _SIZE_RE.match(value)):
        size = float(m.group(1)) * _SIZE_UNITS[m.group(2)]
        if size != int(size):
            raise ctx.fail(expected + " that is a whole number of bytes", value)
        size = int(size)
    else:
        raise ctx.fail(expected, value)
    if size < 1:
        raise ctx.fail(expected, value)
    return size


def _caches(value: Any, ctx: _Ctx) -> Caches:
    return Caches(**_parse_mapping(value, ctx, _CACHE_FIELDS, "a mapping of cache sizes"))


_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$")
_SCOPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


def _compute_capability(value: Any, ctx: _Ctx) -> tuple[int, int]:
    expected = 'a compute capability "major.minor" such as "8.6"'
    text = f"{value:.1f}" if isinstance(value, float) else value
    m = _CC_RE.match(text) if isinstance(text, str) else None
    if m is None or isinstance(value, bool):
        raise ctx.fail(expected, value)
    return int(m.group(1)), int(m.group(2))


def _power_of_two(what: str) -> Callable[[Any, _Ctx], int]:
    def parse_pow2(value: Any, ctx: _Ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
            raise ctx.fail(what, value)
        return value

    return parse_pow2


def _scopes(value: Any, ctx: _Ctx) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ctx.fail("a non-empty list of memory scope names such as [global, shared, local]", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _SCOPE_RE.match(item):
            raise ctx.child(f"[{i}]").fail("a scope name such as shared or wmma.matrix_a", item)
        if item in out:
            raise ctx.child(f"[{i}]").fail("each scope once", item)
        out.append(item)
    if "global" not in out:
        raise ctx.fail('a list that includes "global"', value)
    return tuple(out)


def _gpu(value: Any, ctx: _Ctx) -> GPU:
    gpu = GPU(**_parse_mapping(value, ctx, _GPU_FIELDS, "a mapping of GPU properties"))
    if gpu.max_threads_per_block % gpu.warp_size:
        raise ctx.child("max_threads_per_block").fail(
            f"a multiple of the warp size {gpu.warp_size}", gpu.max_threads_per_block
        )
    optin = gpu.max_shared_memory_per_block_optin
    if optin is not None and optin < gpu.max_shared_memory_per_block:
        raise ctx.child("max_shared_memory_per_block_optin").fail(
            f"at least max_shared_memory_per_block ({gpu.max_shared_memory_per_block} bytes)", optin
        )
    return gpu


_SET_NAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9._/-]*$")


def _intrinsic_names(value: Any, ctx: _Ctx) -> tuple[str, ...]:
    expected = "an intrinsic set: a name (intrinsics/<name>.yaml) or a path ending in .yaml"
    if not isinstance(value, list):
        raise ctx.fail("a list of intrinsic set names such as [x86-avx512-vnni]", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _SET_NAME_RE.match(item):
            raise ctx.child(f"[{i}]").fail(expected, item)
        if item in out:
            raise ctx.child(f"[{i}]").fail("each intrinsic set once", item)
        out.append(item)
    return tuple(out)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _search(value: Any, ctx: _Ctx) -> SearchSpec:
    """``search: {rules: [Name, {Name: {param: value}}, ...]}``, checked against the rule table."""
    from .search.space import RULES, SearchSpaceError  # lazily: the search builds on this module

    if not isinstance(value, dict) or set(value) - {"rules"}:
        raise ctx.fail("a mapping with the key rules (a list of schedule rules)", value)
    rules_ctx = ctx.child("rules")
    items = value.get("rules", [])
    if not isinstance(items, list):
        raise rules_ctx.fail("a list of rule names or {name: {parameter: value}} mappings", items)
    rules = []
    for pos, item in enumerate(items):
        ictx = rules_ctx.child(f"[{pos}]")
        if isinstance(item, str):
            name, params = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, params = next(iter(item.items()))
            params = {} if params is None else params
        else:
            raise ictx.fail("a rule name or a one-key mapping {name: {parameter: value}}", item)
        if name not in RULES:
            raise ictx.message(f"unknown schedule rule {name!r}; the rules are: {', '.join(RULES)}", name)
        if not isinstance(params, dict):
            raise ictx.child(str(name)).fail("a mapping of parameters", params)
        try:
            RULES[name].check_params(params)
        except SearchSpaceError as err:
            raise ictx.child(str(name)).message(str(err), params) from None
        rules.append((name, tuple(sorted((k, _freeze(v)) for k, v in params.items()))))
    return SearchSpec(tuple(rules))


def _description(value: Any, ctx: _Ctx) -> str:
    if not isinstance(value, str):
        raise ctx.fail("a string", value)
    return value


# key -> (parser, required). Order is the documentation order.
_FIELDS: dict[str, tuple[Callable[[Any, _Ctx], Any], bool]] = {
    "name": (_string(_NAME_RE, "a name of letters, digits, '.', '_' and '-'"), True),
    "kind": (_kind, True),
    "triple": (_triple, True),
    "cpu": (_string(_CPU_RE, "an LLVM CPU name such as znver4 or neoverse-n1"), True),
    "features": (_features, True),
    "cores": (_positive_int("a positive integer number of cores"), True),
    "vector_bits": (_vector_bits, True),
    "caches": (_caches, True),
    "gpu": (_gpu, False),
    "intrinsics": (_intrinsic_names, False),
    "description": (_description, False),
    "search": (_search, False),
}
_CACHE_FIELDS: dict[str, tuple[Callable[[Any, _Ctx], Any], bool]] = {
    "l1d": (_size, True),
    "l2": (_size, True),
    "l3": (_size, False),  # required for kind cpu (checked in parse)
}
_GPU_FIELDS: dict[str, tuple[Callable[[Any, _Ctx], Any], bool]] = {
    "compute_capability": (_compute_capability, True),
    "warp_size": (_power_of_two("a power of two (threads per warp)"), True),
    "max_threads_per_block": (_positive_int("a positive integer number of threads"), True),
    "max_shared_memory_per_block": (_size, True),
    "registers_per_block": (_positive_int("a positive integer number of 32-bit registers"), True),
    "registers_per_thread": (_positive_int("a positive integer number of 32-bit registers"), True),
    "memory_scopes": (_scopes, True),
    "max_threads_per_sm": (_positive_int("a positive integer number of threads"), False),
    "max_shared_memory_per_block_optin": (_size, False),
    "shared_memory_per_sm": (_size, False),
}


def _parse_mapping(
    value: Any, ctx: _Ctx, fields: Mapping[str, tuple[Callable[[Any, _Ctx], Any], bool]], what: str
) -> dict[str, Any]:
    known = ", ".join(k if required else f"{k} (optional)" for k, (_, required) in fields.items())
    if not isinstance(value, dict):
        raise ctx.fail(f"{what} with keys {known}", value)
    out: dict[str, Any] = {}
    for key in value:
        if key not in fields:
            raise ctx.child(str(key)).message(f"unknown key {key!r}; the known keys are: {known}", key)
    for key, (parser, required) in fields.items():
        if key in value:
            out[key] = parser(value[key], ctx.child(key))
        elif required:
            raise ctx.child(key).message(f"missing required key; expected keys: {known}", _MISSING)
    return out


def read_yaml(text: str, source: str = "<string>", error: type[HardwareError] = HardwareError) -> Any:
    """The one place YAML is read: ``yaml.safe_load`` of ``text``; a syntax error names ``source``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(source, "", "", message=f"not valid YAML{where}: {problem}") from None


def read_text(path: str | os.PathLike[str], error: type[HardwareError] = HardwareError) -> str:
    """A descriptor file's text; an unreadable file raises ``error`` naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(str(path), "", "", message=f"cannot read: {exc.strerror or exc}") from None


def parse(text: str, source: str = "<string>") -> Hardware:
    """Parse one descriptor's YAML text; ``source`` names it in error messages.

    Intrinsic sets named by a path are resolved relative to ``source``'s directory, and sets
    named by a name are searched next to it first (see ``tensorsearch.intrin.search_path``).
    """
    data = read_yaml(text, source)
    ctx = _Ctx(source, "")
    fields = _parse_mapping(data, ctx, _FIELDS, "a YAML mapping (a hardware descriptor)")
    names = fields.pop("intrinsics", ())
    hw = Hardware(**fields, source=source)
    _check_kind(hw, data, ctx)
    if names:
        from .intrin import schema  # lazily: tensorsearch.intrin builds on this module

        sets = schema.resolve_sets(hw, names, ctx.child("intrinsics"))
        hw = dataclasses.replace(hw, intrinsic_sets=sets)
    return hw


def _check_kind(hw: Hardware, data: dict[str, Any], ctx: _Ctx) -> None:
    """Rules that tie keys together: ``gpu`` exactly for GPUs, ``caches.l3`` for CPUs, sm names."""
    if hw.kind == "gpu" and hw.gpu is None:
        raise ctx.child("gpu").message("missing required key for a gpu descriptor (kind: gpu)", _MISSING)
    if hw.kind == "cpu" and hw.gpu is not None:
        raise ctx.child("gpu").message("a cpu descriptor (kind: cpu) cannot have a gpu section", data["gpu"])
    if hw.kind == "cpu" and "l3" not in data["caches"]:
        raise ctx.child("caches.l3").message("missing required key for a cpu descriptor; expected keys: l1d, l2, l3")
    if hw.gpu is not None and hw.arch.startswith("nvptx") and hw.cpu.startswith("sm_"):
        cc = hw.gpu.compute_capability
        if hw.cpu not in (hw.gpu.sm, hw.gpu.sm + "a"):
            raise ctx.child("cpu").fail(f"{hw.gpu.sm}, the name of compute capability {cc[0]}.{cc[1]}", hw.cpu)


# --------------------------------------------------------------------------------------------
# Finding descriptors.


def search_path() -> list[Path]:
    """The directories searched for ``<name>.yaml``, in order (existing ones only)."""
    dirs: list[Path] = []
    env = os.environ.get("TENSORSEARCH_HARDWARE_PATH")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parent.parent / "hardware")  # source checkout / editable install
    dirs.append(Path(sys.prefix) / "share" / "tensorsearch" / "hardware")  # wheel data files
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d not in seen:
            seen.append(d)
    return seen


def available() -> list[str]:
    """Names of the descriptors found on :func:`search_path` (first one wins per name)."""
    names: list[str] = []
    for d in search_path():
        for p in sorted(d.glob("*.yaml")):
            if p.stem not in names:
                names.append(p.stem)
    return names


def _find(name: str) -> Path:
    for d in search_path():
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    dirs = ", ".join(str(d) for d in search_path()) or "(none exist)"
    raise HardwareError(
        repr(name),
        "",
        "",
        message=f"no such hardware descriptor; known: {', '.join(available()) or '(none)'}; searched {dirs}",
    )


@functools.lru_cache(maxsize=64)
def _load_file(path: str, mtime_ns: int) -> Hardware:
    return parse(read_text(path), path)


def _load_path(path: Path) -> Hardware:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise HardwareError(str(path), "", "", message=f"cannot read: {exc.strerror or exc}") from None
    return _load_file(str(path), mtime)


def load(name_or_path: str | os.PathLike[str] | Hardware) -> Hardware:
    """A descriptor: a :class:`Hardware` as is, ``"host"``, a YAML file's path, or a shipped name."""
    if isinstance(name_or_path, Hardware):
        return name_or_path
    if isinstance(name_or_path, os.PathLike):
        return _load_path(Path(name_or_path))
    if not isinstance(name_or_path, str):
        raise TypeError(f"hardware.load expects a name, a path or a Hardware, not {type(name_or_path).__name__}")
    if name_or_path == "host":
        return host()
    if os.sep in name_or_path or "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        return _load_path(Path(name_or_path))
    return _load_path(_find(name_or_path))


# --------------------------------------------------------------------------------------------
# The host.


def _host_info() -> tuple[str, str, frozenset[str]]:
    import llvmlite.binding as llvm

    cpu = llvm.get_host_cpu_name()
    features = frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    return llvm.get_process_triple(), cpu, features


def _arch_of(triple: str) -> str:
    arch = triple.split("-", 1)[0]
    return "aarch64" if arch == "arm64" else arch


def _matches(hw: Hardware, triple: str, cpu: str, features: frozenset[str]) -> bool:
    if hw.kind != "cpu" or hw.cpu != cpu or _arch_of(hw.triple) != _arch_of(triple):
        return False
    return all((f[1:] in features) == (f[0] == "+") for f in hw.features)


def _sysfs_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text().strip(), _Ctx(str(index / "size"), ""))
        except (OSError, HardwareError):
            continue
        key = {"1": "l1d", "2": "l2", "3": "l3"}.get(level)
        if key is None or (level == "1" and kind != "Data") or kind == "Instruction":
            continue
        sizes.setdefault(key, size)
    return sizes


def _vector_bits_from(arch: str, features: frozenset[str]) -> int:
    if arch == "x86_64":
        if "avx512f" in features:
            return 512
        if "avx" in features:
            return 256
    return 128


def _derive_host(triple: str, cpu: str, features: frozenset[str], checked: list[str]) -> Hardware:
    arch = _arch_of(triple)
    caches = _sysfs_caches()
    guessed = [k for k in ("l1d", "l2", "l3") if k not in caches]
    defaults = {"l1d": 32 * 1024, "l2": 1024 * 1024, "l3": 8 * 1024 * 1024}
    caches = {k: caches.get(k, defaults[k]) for k in ("l1d", "l2", "l3")}
    note = (
        f"derived from the CPU's reported name ({cpu}) and features: no shipped descriptor matches "
        f"(checked {', '.join(checked) or 'none'}); cores from os.cpu_count(), caches from sysfs"
    )
    if guessed:
        note += f" (guessed {', '.join(guessed)}: not reported)"
    name = f"host-{cpu}" if _NAME_RE.match(f"host-{cpu}") else "host"
    return Hardware(
        name=name,
        kind="cpu",
        triple=triple,
        cpu=cpu,
        features=tuple(sorted("+" + f for f in features)),
        cores=os.cpu_count() or 1,
        vector_bits=_vector_bits_from(arch, features),
        caches=Caches(**caches),
        description=f"the running {arch} CPU ({cpu}), as LLVM reports it",
        source=None,
        note=note,
    )


@functools.cache
def host() -> Hardware:
    """The descriptor of the running CPU.

    A shipped descriptor is chosen when its ``cpu`` equals LLVM's host CPU name, its triple has the
    host's architecture, and each of its ``+feature`` is reported present (each ``-feature``
    absent); ``cores`` is then replaced by ``os.cpu_count()`` when the machine has a different
    count (``note`` says so). Otherwise a descriptor is built from the reported name and features
    (cores from ``os.cpu_count()``, caches from ``/sys/devices/system/cpu/cpu0/cache``), its
    ``note`` explains that, and a :class:`HardwareWarning` is issued once per process.
    """
    hw = _select_host(*_host_info())
    if hw.source is None:
        warnings.warn(f"hardware 'host': {hw.note}", HardwareWarning, stacklevel=2)
    return hw


def _select_host(triple: str, cpu: str, features: frozenset[str]) -> Hardware:
    checked: list[str] = []
    for name in available():
        try:
            hw = load(name)
        except HardwareError:
            continue
        checked.append(name)
        if _matches(hw, triple, cpu, features):
            cores = os.cpu_count() or hw.cores
            if cores != hw.cores:
                hw = dataclasses.replace(hw, cores=cores, note=f"cores set to os.cpu_count() = {cores}")
            return hw
    return _derive_host(triple, cpu, features, checked)

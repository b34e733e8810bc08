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
import difflib
import functools
import hashlib
import os
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from .intrinsics import Intrinsic, IntrinsicSet, load_intrinsic, resolve_sets
from .intrinsics import available as available_sets
from .reader import (
    KNOWN_ARCHES,
    MISSING,
    NAME_RE,
    SCOPE_RE,
    Ctx,
    HardwareError,
    did_you_mean,
    parse_compute_capability,
    parse_features,
    parse_mapping,
    parse_size,
    positive_int,
    read_text,
    read_yaml,
    search_path,
    string_field,
)

__all__ = [
    "GPU",
    "Caches",
    "CpuIdentity",
    "Hardware",
    "HardwareError",
    "HardwareWarning",
    "available",
    "host",
    "host_identity",
    "SearchSpec",
    "arch_of",
    "host_triple",
    "load",
    "native",
    "parse",
    "resolve",
]


class HardwareWarning(UserWarning):
    """The host CPU matches no shipped descriptor, so one was derived from what the CPU reports."""


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

    Names and parameters are those of ``tensorsearch.search.space.registry.RULES`` (checked there, when a
    design space is made); an empty tuple means the defaults for the descriptor's kind."""

    rules: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()


# CPU names that claim no model, only an instruction-set level: a descriptor naming one describes
# every machine that runs its code (see Hardware.why_not_machine)
GENERIC_CPUS = frozenset({"generic", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"})


@dataclass(frozen=True)
class KindSchema:
    """What a descriptor ``kind`` asks of its YAML, and whether its code runs on the host CPU the
    descriptor describes (``host_cpu``; a GPU's runs on its device). :data:`KINDS` holds one per
    kind: the only place ``target`` looks at a kind's name."""

    host_cpu: bool
    gpu_section: bool  # the ``gpu`` key is required (else it is refused)
    needs_l3: bool  # ``caches.l3`` is required


KINDS: dict[str, KindSchema] = {
    "cpu": KindSchema(host_cpu=True, gpu_section=False, needs_l3=True),
    "gpu": KindSchema(host_cpu=False, gpu_section=True, needs_l3=False),
}


@dataclass(frozen=True)
class CpuIdentity:
    """Which CPU a machine has: what a tuning record keeps of the machine that timed it.

    ``arch`` is the architecture family of its LLVM triple (``x86_64``, ``aarch64``), ``cpu``
    LLVM's name for the host CPU (``icelake-server``, ``znver4``), ``model`` the ``model name`` of
    ``/proc/cpuinfo`` (None where there is none, as on most aarch64 kernels) and ``features`` 12
    hex digits hashing the sorted names of the CPU features LLVM reports enabled, so two machines
    of one CPU name whose hypervisors expose different features tell apart.
    """

    arch: str
    cpu: str
    model: str | None
    features: str

    def describe(self) -> str:
        """``x86_64 icelake-server (Intel(R) Xeon(R) Processor @ 2.80GHz)``: arch, CPU and model."""
        text = f"{self.arch} {self.cpu}"
        return f"{text} ({self.model})" if self.model else text

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the four fields."""
        return {"arch": self.arch, "cpu": self.cpu, "model": self.model, "features": self.features}

    @staticmethod
    def from_json(d: Any) -> CpuIdentity:
        """Read what :meth:`to_json` wrote; ValueError naming the key that is missing or not a string."""
        if not isinstance(d, dict):
            raise ValueError(f"a CPU identity is a JSON object, not {type(d).__name__}")
        for key in ("arch", "cpu", "features"):
            if not isinstance(d.get(key), str):
                raise ValueError(f"the CPU identity's {key!r} is missing or not a string")
        model = d.get("model")
        if model is not None and not isinstance(model, str):
            raise ValueError("the CPU identity's 'model' is not a string")
        return CpuIdentity(d["arch"], d["cpu"], model, d["features"])


def feature_hash(features: Iterable[str]) -> str:
    """12 hex digits hashing a set of CPU feature names (without ``+``), whatever their order."""
    text = ",".join(sorted(set(features)))
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


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
    intrinsic_sets: tuple[IntrinsicSet, ...] = ()  # in the order listed
    search: SearchSpec | None = None  # the ``search:`` section: the auto-scheduler's rules
    # contract ``a * b + c`` (and ``a * b - c``, ``c - a * b``) in float32/float64 into
    # ``llvm.fmuladd``, which LLVM turns into one FMA instruction: one rounding instead of two,
    # so results can differ from the interpreter in the last bit (C's -ffp-contract=on)
    # (a compile option, not part of the descriptor: ``metadata`` keeps it out of the database's hardware key)
    fp_contract: bool = field(default=False, metadata={"descriptor": False})

    @property
    def intrinsics(self) -> tuple[Intrinsic, ...]:
        """Every intrinsic of the offered sets, in order."""
        return tuple(i for s in self.intrinsic_sets for i in s.intrinsics)

    def intrinsic(self, name: str) -> Intrinsic:
        """The offered intrinsic called ``name``; KeyError listing the offered ones otherwise."""
        for i in self.intrinsics:
            if i.name == name:
                return i
        offered = ", ".join(i.name for i in self.intrinsics) or "(none)"
        raise KeyError(f"hardware {self.name} offers no intrinsic {name!r}; it offers: {offered}")

    def with_fp_contract(self, on: bool = True) -> Hardware:
        """This descriptor with ``a * b + c`` contraction into FMA switched on (or off)."""
        return dataclasses.replace(self, fp_contract=on)

    @property
    def l3_bytes(self) -> int | None:
        """The L3 size in bytes, None when the descriptor has none (GPUs)."""
        return self.caches.l3 or None

    @property
    def runs_here(self) -> bool:
        """Whether code for this descriptor can run on this machine: the same architecture, and no
        feature it enables that this CPU reports it lacks (AVX-512 code on an AVX2 CPU would die
        of an illegal instruction)."""
        triple, _, _ = _host_info()
        return arch_of(self.triple) == arch_of(triple) and self.describes_cpu and not self.missing_here()

    @property
    def describes_cpu(self) -> bool:
        """Whether this descriptor's code runs on the host CPU it describes (its kind's
        :attr:`KindSchema.host_cpu`): a CPU descriptor's does, a GPU's runs on its device."""
        return KINDS[self.kind].host_cpu

    def missing_here(self) -> list[str]:
        """The features this descriptor enables that this CPU reports as absent."""
        return self.missing_on(host_absent_features())

    def missing_on(self, absent: Iterable[str]) -> list[str]:
        """The features this descriptor enables that are among ``absent`` (names without ``+``)."""
        lacks = set(absent)
        return [f for f in self.features if f.startswith("+") and f[1:] in lacks]

    def why_not_runnable_on(self, triple: str, absent: Iterable[str]) -> str | None:
        """Why code for this CPU descriptor cannot run on a machine of LLVM triple ``triple``
        whose CPU lacks the features ``absent`` (names without ``+``); None when it can."""
        if arch_of(self.triple) != arch_of(triple):
            return f"its architecture is {arch_of(triple)}, the descriptor's {arch_of(self.triple)}"
        missing = self.missing_on(absent)
        if missing:
            return f"its CPU lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
        return None

    def why_not_machine(self, identity: CpuIdentity, present: Iterable[str] | None) -> str | None:
        """Why a machine whose CPU is ``identity``, reporting the features ``present`` (names
        without ``+``; None: not known, only the architecture and CPU are compared), is not the
        machine this CPU descriptor describes; None when it is.

        It is when it has the descriptor's architecture and CPU name, and every feature the
        descriptor lists agrees: each ``+feature`` present, each ``-feature`` absent (features it
        does not list may be either way: ``x86-emeraldrapids`` describes an Emerald Rapids that
        exposes AMX too). A descriptor whose ``cpu`` names no model (:data:`GENERIC_CPUS`, such
        as ``x86-64-v3``) describes every CPU of its architecture that has its features. A GPU
        descriptor describes no CPU, so the CPU never disagrees with it (None)."""
        if not self.describes_cpu:
            return None
        machine = f"an {identity.describe()}"
        if arch_of(self.triple) != arch_of(identity.arch):
            return f"it is {machine}, not an {arch_of(self.triple)} machine"
        if self.cpu not in GENERIC_CPUS and self.cpu != identity.cpu:
            return f"it is {machine}, not {'an' if self.cpu[0] in 'aeiou' else 'a'} {self.cpu}"
        if present is None:
            return None
        have = set(present)
        lacks = [f[1:] for f in self.features if f.startswith("+") and f[1:] not in have]
        if lacks:
            return f"it is {machine} without {_some(lacks)}"
        extra = [f[1:] for f in self.features if f.startswith("-") and f[1:] in have]
        if extra:
            return f"it is {machine} with {_some(extra)}, which {self.name} disables"
        return None

    def why_not_this_machine(self) -> str | None:
        """Why this machine is not the one this CPU descriptor describes (:meth:`why_not_machine`
        of the running CPU: ``host()`` and a descriptor it matches are; another CPU's is not,
        even where its code runs here); None when it is."""
        return self.why_not_machine(host_identity(), _host_info()[2])

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


def _some(names: list[str]) -> str:
    """Up to four names, comma-separated, with `` ...`` when there are more."""
    return ", ".join(names[:4]) + (" ..." if len(names) > 4 else "")


_CPU_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_TRIPLE_RE = re.compile(r"^([a-z0-9_]+)-([a-z0-9_]+)-([a-z0-9_]+)(-[a-z0-9_]+)?$")


# --------------------------------------------------------------------------------------------
# The schema: one parser per key. A parser gets (value, ctx) and returns the field's value or
# raises HardwareError through ctx.fail. Later issues extend these tables.


def _kind(value: Any, ctx: Ctx) -> str:
    if value not in KINDS:
        raise ctx.fail(" or ".join(f'"{k}"' for k in KINDS), value)
    return value


def _triple(value: Any, ctx: Ctx) -> str:
    expected = f"an LLVM target triple arch-vendor-os[-env] with arch one of {', '.join(KNOWN_ARCHES)}"
    if not isinstance(value, str):
        raise ctx.fail(expected, value)
    m = _TRIPLE_RE.match(value)
    if m is None or m.group(1) not in KNOWN_ARCHES:
        raise ctx.fail(expected, value)
    return value


def _vector_bits(value: Any, ctx: Ctx) -> int:
    expected = "a power of two between 32 and 4096 (the widest SIMD register in bits)"
    if isinstance(value, bool) or not isinstance(value, int) or not 32 <= value <= 4096 or value & (value - 1):
        raise ctx.fail(expected, value)
    return value


def _caches(value: Any, ctx: Ctx) -> Caches:
    return Caches(**parse_mapping(value, ctx, _CACHE_FIELDS, "a mapping of cache sizes"))


def _power_of_two(what: str) -> Callable[[Any, Ctx], int]:
    def parse_pow2(value: Any, ctx: Ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
            raise ctx.fail(what, value)
        return value

    return parse_pow2


def _scopes(value: Any, ctx: Ctx) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ctx.fail("a non-empty list of memory scope names such as [global, shared, local]", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not SCOPE_RE.match(item):
            raise ctx.child(f"[{i}]").fail("a scope name such as shared or wmma.matrix_a", item)
        if item in out:
            raise ctx.child(f"[{i}]").fail("each scope once", item)
        out.append(item)
    if "global" not in out:
        raise ctx.fail('a list that includes "global"', value)
    return tuple(out)


def _gpu(value: Any, ctx: Ctx) -> GPU:
    gpu = GPU(**parse_mapping(value, ctx, _GPU_FIELDS, "a mapping of GPU properties"))
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


_SETNAME_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9._/-]*$")


def _intrinsic_names(value: Any, ctx: Ctx) -> tuple[str, ...]:
    expected = "an intrinsic set: a name (intrinsics/<name>.yaml) or a path ending in .yaml"
    if not isinstance(value, list):
        raise ctx.fail("a list of intrinsic set names such as [x86-avx512-vnni]", value)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _SETNAME_RE.match(item):
            raise ctx.child(f"[{i}]").fail(expected, item)
        if item in out:
            raise ctx.child(f"[{i}]").fail("each intrinsic set once", item)
        out.append(item)
    return tuple(out)


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _search(value: Any, ctx: Ctx) -> SearchSpec:
    """``search: {rules: [Name, {Name: {param: value}}, ...]}``, checked for shape here; the rule
    names and parameters are checked by ``tensorsearch.search`` (the layer that defines the rules)
    when a design space is made for the descriptor, with the same ``file: search.rules[i]`` location."""
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
        if not isinstance(name, str):
            raise ictx.fail("a rule name (a string)", name)
        if not isinstance(params, dict):
            raise ictx.child(str(name)).fail("a mapping of parameters", params)
        rules.append((name, tuple(sorted((k, _freeze(v)) for k, v in params.items()))))
    return SearchSpec(tuple(rules))


def _description(value: Any, ctx: Ctx) -> str:
    if not isinstance(value, str):
        raise ctx.fail("a string", value)
    return value


# key -> (parser, required). Order is the documentation order.
_FIELDS: dict[str, tuple[Callable[[Any, Ctx], Any], bool]] = {
    "name": (string_field(NAME_RE, "a name of letters, digits, '.', '_' and '-'"), True),
    "kind": (_kind, True),
    "triple": (_triple, True),
    "cpu": (string_field(_CPU_RE, "an LLVM CPU name such as znver4 or neoverse-n1"), True),
    "features": (parse_features, True),
    "cores": (positive_int("a positive integer number of cores"), True),
    "vector_bits": (_vector_bits, True),
    "caches": (_caches, True),
    "gpu": (_gpu, False),
    "intrinsics": (_intrinsic_names, False),
    "description": (_description, False),
    "search": (_search, False),
}
_CACHE_FIELDS: dict[str, tuple[Callable[[Any, Ctx], Any], bool]] = {
    "l1d": (parse_size, True),
    "l2": (parse_size, True),
    "l3": (parse_size, False),  # required for kind cpu (checked in parse)
}
_GPU_FIELDS: dict[str, tuple[Callable[[Any, Ctx], Any], bool]] = {
    "compute_capability": (parse_compute_capability, True),
    "warp_size": (_power_of_two("a power of two (threads per warp)"), True),
    "max_threads_per_block": (positive_int("a positive integer number of threads"), True),
    "max_shared_memory_per_block": (parse_size, True),
    "registers_per_block": (positive_int("a positive integer number of 32-bit registers"), True),
    "registers_per_thread": (positive_int("a positive integer number of 32-bit registers"), True),
    "memory_scopes": (_scopes, True),
    "max_threads_per_sm": (positive_int("a positive integer number of threads"), False),
    "max_shared_memory_per_block_optin": (parse_size, False),
    "shared_memory_per_sm": (parse_size, False),
}


def parse(text: str, source: str = "<string>") -> Hardware:
    """Parse one descriptor's YAML text; ``source`` names it in error messages.

    Intrinsic sets named by a path are resolved relative to ``source``'s directory, and sets
    named by a name are searched next to it first (see ``tensorsearch.intrin.search_path``).
    """
    data = read_yaml(text, source)
    ctx = Ctx(source, "", text=text)
    fields = parse_mapping(data, ctx, _FIELDS, "a YAML mapping (a hardware descriptor)")
    names = fields.pop("intrinsics", ())
    hw = Hardware(**fields, source=source)
    _check_kind(hw, data, ctx)
    if names:
        sets = resolve_sets(hw, names, ctx.child("intrinsics"))
        hw = dataclasses.replace(hw, intrinsic_sets=sets)
    _check_llvm_names(hw, ctx)
    return hw


def _check_llvm_names(hw: Hardware, ctx: Ctx) -> None:
    """The CPU and every feature must be names LLVM knows for the triple: LLVM itself only prints
    "'+fmaa' is not a recognized feature for this target (ignoring feature)" and goes on."""
    for complaint in _llvm_complaints(hw.triple, hw.cpu, hw.feature_string):
        m = re.match(r"'(.+?)' is not a recognized (feature|processor)", complaint)
        if m is None:
            continue
        name, what = m.groups()
        if what == "processor":
            raise ctx.child("cpu").message(f"{name!r} is not a CPU LLVM knows for {hw.arch}", name)
        hint = _closest_feature(name, hw.arch)
        index = hw.features.index(name) if name in hw.features else None
        where = ctx.child("features").child(f"[{index}]") if index is not None else ctx.child("features")
        raise where.message(f"{name!r} is not a feature LLVM knows for {hw.arch}{hint}", name)


@functools.cache
def _llvm_complaints(triple: str, cpu: str, features: str) -> tuple[str, ...]:
    """What LLVM prints to stderr while making a target machine for (triple, cpu, features)."""
    _init_llvm()
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError:
        return ()  # a triple LLVM does not know: the triple key's parser already names the arch
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    os.close(write)
    try:
        target.create_target_machine(cpu=cpu, features=features)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    os.set_blocking(read, False)
    try:
        text = os.read(read, 1 << 16).decode(errors="replace")
    except BlockingIOError:
        text = ""
    os.close(read)
    return tuple(line for line in text.splitlines() if line.strip())


def _closest_feature(name: str, arch: str) -> str:
    """The hint ', did you mean +fma?' when this host's LLVM lists a close feature name of the same arch."""
    if arch_of(arch) != arch_of(host_triple()):
        return ""
    known = ["+" + k for k in llvm.get_host_cpu_features()]
    close = difflib.get_close_matches(name if name[0] == "+" else "+" + name[1:], known, n=1)
    return f", did you mean {name[0]}{close[0][1:]}?" if close else ""


@functools.cache
def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def _check_kind(hw: Hardware, data: dict[str, Any], ctx: Ctx) -> None:
    """Rules that tie keys together: ``gpu`` exactly for GPUs, ``caches.l3`` for CPUs, sm names."""
    schema = KINDS[hw.kind]
    if schema.gpu_section and hw.gpu is None:
        raise ctx.child("gpu").message(f"missing required key for a {hw.kind} descriptor (kind: {hw.kind})", MISSING)
    if not schema.gpu_section and hw.gpu is not None:
        raise ctx.child("gpu").message(
            f"a {hw.kind} descriptor (kind: {hw.kind}) cannot have a gpu section", data["gpu"]
        )
    if schema.needs_l3 and "l3" not in data["caches"]:
        raise ctx.child("caches.l3").message("missing required key for a cpu descriptor; expected keys: l1d, l2, l3")
    if hw.gpu is not None and hw.arch.startswith("nvptx") and hw.cpu.startswith("sm_"):
        cc = hw.gpu.compute_capability
        if hw.cpu not in (hw.gpu.sm, hw.gpu.sm + "a"):
            raise ctx.child("cpu").fail(f"{hw.gpu.sm}, the name of compute capability {cc[0]}.{cc[1]}", hw.cpu)


# --------------------------------------------------------------------------------------------
# Finding descriptors.


def available() -> list[str]:
    """Names of the descriptors found on :func:`search_path` (first one wins per name)."""
    names: list[str] = []
    for d in search_path("hardware"):
        for p in sorted(d.glob("*.yaml")):
            if p.stem not in names:
                names.append(p.stem)
    return names


def _find(name: str) -> Path:
    for d in search_path("hardware"):
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    dirs = ", ".join(str(d) for d in search_path("hardware")) or "(none exist)"
    raise HardwareError(
        repr(name),
        "",
        "",
        message=f"no such hardware descriptor; {did_you_mean(name, [*available(), 'host'])}"
        f"known: {', '.join(available()) or '(none)'}; searched {dirs}",
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


@functools.cache
def _host_info() -> tuple[str, str, frozenset[str]]:
    """The host's triple, LLVM CPU name and the features LLVM reports present."""
    cpu = llvm.get_host_cpu_name()
    features = frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    return llvm.get_process_triple(), cpu, features


@functools.cache
def host_identity() -> CpuIdentity:
    """The running machine's :class:`CpuIdentity`: its architecture, LLVM CPU name, the model
    name of ``/proc/cpuinfo`` (None where unreadable or absent) and its enabled features' hash."""
    triple, cpu, features = _host_info()
    return CpuIdentity(arch_of(triple), cpu, _cpuinfo_model(), feature_hash(features))


def _cpuinfo_model(path: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first ``model name`` of ``/proc/cpuinfo``, spaces collapsed; None when there is none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return None


def host_present_features() -> frozenset[str]:
    """The CPU features LLVM reports present on this machine (names without ``+``)."""
    return _host_info()[2]


@functools.cache
def host_absent_features() -> frozenset[str]:
    """The CPU features LLVM reports absent on this machine (names without ``+``)."""
    return frozenset(k for k, v in llvm.get_host_cpu_features().items() if not v)


def resolve(hardware: Hardware | str | os.PathLike[str] | None = None) -> Hardware:
    """The descriptor a run is given: None means the host (:func:`host`), a name or path is
    loaded (:func:`load`), a :class:`Hardware` is returned as it is."""
    return host() if hardware is None else load(hardware)


def arch_of(triple: str) -> str:
    """The architecture family of a triple (``arm64`` is ``aarch64``, ``amd64`` is ``x86_64``)."""
    arch = triple.split("-", 1)[0]
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


def host_triple() -> str:
    """LLVM's triple of the running process."""
    return _host_info()[0]


def _matches(hw: Hardware, triple: str, cpu: str, features: frozenset[str]) -> bool:
    if not hw.describes_cpu or hw.cpu != cpu or arch_of(hw.triple) != arch_of(triple):
        return False
    return all((f[1:] in features) == (f[0] == "+") for f in hw.features)


def _sysfs_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text().strip(), Ctx(str(index / "size"), ""))
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
    arch = arch_of(triple)
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
    name = f"host-{cpu}" if NAME_RE.match(f"host-{cpu}") else "host"
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


def _with_runnable_sets(hw: Hardware) -> Hardware:
    """A derived descriptor with every shipped CPU intrinsic set whose requirements it meets (a
    set that would define an intrinsic name twice is left out); ``note`` lists them."""
    sets: list[IntrinsicSet] = []
    names: set[str] = set()
    for set_name in available_sets():
        try:
            iset = load_intrinsic(set_name)
        except HardwareError:
            continue
        if iset.requires.why_not(hw) is None and not names & set(iset.names):
            sets.append(iset)
            names |= set(iset.names)
    if not sets:
        return hw
    note = f"{hw.note}; intrinsic sets it can run: {', '.join(s.name for s in sets)}"
    return dataclasses.replace(hw, intrinsic_sets=tuple(sets), note=note)


@functools.cache
def host() -> Hardware:
    """The descriptor of the running CPU.

    A shipped descriptor is chosen when its ``cpu`` equals LLVM's host CPU name, its triple has the
    host's architecture, and each of its ``+feature`` is reported present (each ``-feature``
    absent), the one naming the most features where several match; ``cores`` is then replaced by
    ``os.cpu_count()`` when the machine has a different count (``note`` says so). Otherwise a descriptor is built from the reported name and features
    (cores from ``os.cpu_count()``, caches from ``/sys/devices/system/cpu/cpu0/cache``), its
    ``note`` explains that, and a :class:`HardwareWarning` is issued once per process.
    """
    hw = _select_host(*_host_info())
    if hw.source is None:
        warnings.warn(f"hardware 'host': {hw.note}", HardwareWarning, stacklevel=2)
    return hw


@functools.cache
def native() -> Hardware:
    """The running CPU exactly as LLVM reports it (its name and every feature it has), offering no
    intrinsic sets and issuing no warning: the target for code that only has to run on this machine,
    such as an intrinsic's verification (``tensorsearch.runtime.verify``)."""
    triple, cpu, features = _host_info()
    hw = _derive_host(triple, cpu, features, [])
    return dataclasses.replace(hw, note=f"the running CPU ({cpu}) as LLVM reports it")


def _select_host(triple: str, cpu: str, features: frozenset[str]) -> Hardware:
    """The matching shipped descriptor that names the most features (x86-emeraldrapids-amx over
    x86-emeraldrapids where the VM exposes AMX), else one derived from what LLVM reports."""
    checked: list[str] = []
    matching: list[Hardware] = []
    for name in available():
        try:
            hw = load(name)
        except HardwareError:
            continue
        checked.append(name)
        if _matches(hw, triple, cpu, features):
            matching.append(hw)
    if not matching:
        return _with_runnable_sets(_derive_host(triple, cpu, features, checked))
    hw = max(matching, key=lambda m: len(m.features))  # the first of equals, in available() order
    cores = os.cpu_count() or hw.cores
    if cores != hw.cores:
        hw = dataclasses.replace(hw, cores=cores, note=f"cores set to os.cpu_count() = {cores}")
    return hw

"""The one YAML reader of the target layer: files, error locations, shared field parsers, search paths.

Every hardware descriptor (``hardware/*.yaml``) and intrinsic set (``intrinsics/*.yaml``) is read
through :func:`read_yaml` (``yaml.safe_load``) and parsed by tables of field parsers: a parser gets
``(value, ctx)`` and returns the field's value or raises through ``ctx.fail``/``ctx.message`` an
error (:class:`HardwareError` or a subclass) whose text starts with ``file:LINE: key.path:`` (the
line of the key, or of the nearest enclosing key that is there; worked out from the text only
when an error is raised).

:func:`search_path` is the one place that says where YAML files are found (see
docs/hardware-yaml.md, "Where files are found").
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "KNOWN_ARCHES",
    "MISSING",
    "NAME_RE",
    "SCOPE_RE",
    "Ctx",
    "HardwareError",
    "Parser",
    "describe",
    "did_you_mean",
    "key_line",
    "parse_compute_capability",
    "parse_features",
    "parse_mapping",
    "parse_size",
    "positive_int",
    "read_text",
    "read_yaml",
    "search_path",
    "string_field",
]


class HardwareError(ValueError):
    """A hardware descriptor that cannot be found or is malformed.

    ``source`` is the file (or ``"<string>"``), ``key`` the dotted key path ("" for the whole
    document), ``line`` the key's line in the file (None when unknown), ``expected`` and ``found``
    describe the mistake.
    """

    def __init__(
        self,
        source: str,
        key: str,
        expected: str,
        found: Any = None,
        *,
        message: str | None = None,
        line: int | None = None,
    ):
        self.source = source
        self.key = key
        self.line = line
        self.expected = expected
        self.found = found
        at = f"{source}:{line}" if line is not None else source
        where = f"{at}: {key}" if key else at
        text = message if message is not None else f"expected {expected}, found {describe(found)}"
        super().__init__(f"{where}: {text}")


def describe(value: Any) -> str:
    if value is MISSING:
        return "nothing (the key is missing)"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


MISSING = object()


class Ctx:
    """Where a value sits (file and key path) and which error class reports mistakes there.

    ``text`` is the YAML text the value was read from (None when there is none): an error looks
    up the key's line in it."""

    def __init__(
        self, source: str, key: str, error: type[HardwareError] = HardwareError, text: str | None = None
    ) -> None:
        self.source = source
        self.key = key
        self.error = error
        self.text = text

    def child(self, key: str) -> Ctx:
        sub = f"{self.key}.{key}" if self.key and not key.startswith("[") else self.key + key
        return Ctx(self.source, sub, self.error, self.text)

    def line(self) -> int | None:
        return None if self.text is None else key_line(self.text, self.key)

    def fail(self, expected: str, found: Any) -> HardwareError:
        return self.error(self.source, self.key, expected, found, line=self.line())

    def message(self, text: str, found: Any = None) -> HardwareError:
        """An error whose whole message (after ``file:LINE: key:``) is ``text``."""
        return self.error(self.source, self.key, "", found, message=text, line=self.line())


Parser = Callable[[Any, Ctx], Any]


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_FEATURE_RE = re.compile(r"^[+-][A-Za-z0-9][A-Za-z0-9._-]*$")
KNOWN_ARCHES = (
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


def string_field(pattern: re.Pattern[str], what: str) -> Callable[[Any, Ctx], str]:
    def parse_string(value: Any, ctx: Ctx) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ctx.fail(what, value)
        return value

    return parse_string


def parse_features(value: Any, ctx: Ctx) -> tuple[str, ...]:
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


def positive_int(what: str) -> Callable[[Any, Ctx], int]:
    def parse_int(value: Any, ctx: Ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ctx.fail(what, value)
        return value

    return parse_int


def parse_size(value: Any, ctx: Ctx) -> int:
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


_CC_RE = re.compile(r"^(\d{1,2})\.(\d)$")
SCOPE_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


def parse_compute_capability(value: Any, ctx: Ctx) -> tuple[int, int]:
    expected = 'a compute capability "major.minor" such as "8.6"'
    text = f"{value:.1f}" if isinstance(value, float) else value
    m = _CC_RE.match(text) if isinstance(text, str) else None
    if m is None or isinstance(value, bool):
        raise ctx.fail(expected, value)
    return int(m.group(1)), int(m.group(2))


def parse_mapping(
    value: Any, ctx: Ctx, fields: Mapping[str, tuple[Callable[[Any, Ctx], Any], bool]], what: str
) -> dict[str, Any]:
    known = ", ".join(k if required else f"{k} (optional)" for k, (_, required) in fields.items())
    if not isinstance(value, dict):
        raise ctx.fail(f"{what} with keys {known}", value)
    out: dict[str, Any] = {}
    for key in value:
        if key not in fields:
            hint = did_you_mean(str(key), list(fields))
            raise ctx.child(str(key)).message(f"unknown key {key!r}; {hint}the known keys are: {known}", key)
    for key, (parser, required) in fields.items():
        if key in value:
            out[key] = parser(value[key], ctx.child(key))
        elif required:
            raise ctx.child(key).message(f"missing required key; expected keys: {known}", MISSING)
    return out


def did_you_mean(word: str, known: list[str]) -> str:
    """ "did you mean 'X'? " for the known word closest to ``word``, else "". A typo seldom changes
    the first letter: a candidate that starts with another one must be much closer."""
    for close in difflib.get_close_matches(word, known, n=3, cutoff=0.6):
        ratio = difflib.SequenceMatcher(None, word, close).ratio()
        if close[:1].lower() == word[:1].lower() or ratio >= 0.85:
            return f"did you mean {close!r}? "
    return ""


def key_line(text: str, key: str) -> int | None:
    """The line (from 1) of ``key`` (a key path such as ``intrinsics[0].llvm.args[2]``) in the YAML
    ``text``, or of the nearest enclosing key there; None when the text is not YAML or the key
    path lies outside every key."""
    lines = _key_lines(text)
    while key:
        if key in lines:
            return lines[key]
        cut = max(key.rfind("."), key.rfind("["))
        key = key[: max(cut, 0)]
    return None


@functools.lru_cache(maxsize=16)
def _key_lines(text: str) -> dict[str, int]:
    """Every key path of the YAML ``text`` with the line its key (or sequence item) starts on."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                sub = f"{path}.{k.value}" if path else str(k.value)
                out.setdefault(sub, k.start_mark.line + 1)
                walk(v, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                sub = f"{path}[{i}]"
                out.setdefault(sub, v.start_mark.line + 1)
                walk(v, sub)

    if root is not None:
        walk(root, "")
    return out


def read_yaml(text: str, source: str = "<string>", error: type[HardwareError] = HardwareError) -> Any:
    """The one place YAML is read: ``yaml.safe_load`` of ``text``; a syntax error names ``source``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        line = mark.line + 1 if mark is not None else None
        raise error(source, "", "", message=f"not valid YAML{where}: {problem}", line=line) from None


def read_text(path: str | os.PathLike[str], error: type[HardwareError] = HardwareError) -> str:
    """A descriptor file's text; an unreadable file raises ``error`` naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(str(path), "", "", message=f"cannot read: {exc.strerror or exc}") from None


def search_path(kind: str, near: str | os.PathLike[str] | None = None) -> list[Path]:
    """The directories searched for ``<name>.yaml`` of ``kind`` ("hardware" or "intrinsics"), in order.

    ``near`` (the directory of the hardware file that names an intrinsic set) comes first, then
    ``near/intrinsics`` and ``near/../intrinsics``; then the directories of the environment
    variable ``TENSORSEARCH_HARDWARE_PATH`` or ``TENSORSEARCH_INTRINSICS_PATH``
    (``os.pathsep``-separated); then ``<kind>/`` of a source checkout or editable install; then
    ``<sys.prefix>/share/tensorsearch/<kind>``, where a wheel installs the shipped files. Only
    existing directories are listed, each once.
    """
    if kind not in ("hardware", "intrinsics"):
        raise ValueError(f"search_path: kind must be 'hardware' or 'intrinsics', not {kind!r}")
    dirs: list[Path] = []
    if near is not None:
        dirs += [Path(near), Path(near) / kind, Path(near).parent / kind]
    env = os.environ.get(f"TENSORSEARCH_{kind.upper()}_PATH")
    if env:
        dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs.append(Path(__file__).resolve().parents[2] / kind)  # source checkout / editable install
    dirs.append(Path(sys.prefix) / "share" / "tensorsearch" / kind)  # wheel data files
    seen: list[Path] = []
    for d in dirs:
        d = d.resolve() if d.is_dir() else d
        if d.is_dir() and d not in seen:
            seen.append(d)
    return seen

"""The model layer's dataflow graph: immutable nodes over named, statically shaped values.

An imported ONNX model (:mod:`.onnx_import`) becomes a :class:`Graph`::

    Graph resnet50
      input  input: float32[1, 3, 224, 224]
      %/conv1/Conv_output_0 = Conv(input, conv1.weight, conv1.bias) {pads=(3, 3, 3, 3), strides=(2, 2)}
      %/relu/Relu_output_0 = Relu(%/conv1/Conv_output_0)
      ...
      output output: float32[1, 1000]

Nodes are in topological order; every value (graph input, constant, node output) has a
:class:`Value` with a static shape and a dtype string (``float32``, ``int8``, ``int64``, ...).
Constants (initializers and whatever import folded) are numpy arrays, read-only. Passes
(:mod:`.passes`) take a graph and return a new one.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Graph", "GraphError", "Node", "Value"]


class GraphError(ValueError):
    """A model the graph layer cannot take; the message names the file, node, op type or value."""


@dataclass(frozen=True)
class Value:
    """A tensor of the graph: its name, static shape and dtype (``float32``, ``int64``, ...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.flags.writeable = False
    return value


@dataclass(frozen=True)
class Node:
    """One operator: ``outputs = op(inputs) {attrs}``; an absent optional input is ``""``.

    ``attrs`` hold ints, floats, strings, tuples of those, or read-only numpy arrays (ONNX tensor
    attributes). ``opset`` is the version of the operator's domain the model imports.
    """

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    opset: int = 0
    domain: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        frozen = {k: _freeze(v) for k, v in dict(self.attrs).items()}
        object.__setattr__(self, "attrs", types.MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash((self.name, self.op, self.inputs, self.outputs))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        if (self.name, self.op, self.inputs, self.outputs, self.opset, self.domain) != (
            other.name,
            other.op,
            other.inputs,
            other.outputs,
            other.opset,
            other.domain,
        ):
            return False
        if self.attrs.keys() != other.attrs.keys():
            return False
        return all(_attr_equal(self.attrs[k], other.attrs[k]) for k in self.attrs)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def with_(self, **changes: Any) -> Node:
        """A copy with some fields replaced (``attrs`` merged into the old ones)."""
        fields = {
            "name": self.name,
            "op": self.op,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "attrs": dict(self.attrs),
            "opset": self.opset,
            "domain": self.domain,
        }
        if "attrs" in changes:
            fields["attrs"].update(changes.pop("attrs"))
        fields.update(changes)
        return Node(**fields)

    @property
    def where(self) -> str:
        """How an error names this node: ``node '/conv1/Conv' (Conv, opset 17)``."""
        dom = f"{self.domain}." if self.domain else ""
        return f"node {self.name!r} ({dom}{self.op}, opset {self.opset})"

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.attrs.items()))
        ins = ", ".join(i if i else "<none>" for i in self.inputs)
        return f"{', '.join(self.outputs)} = {self.op}({ins})" + (f" {{{attrs}}}" if attrs else "")


def _attr_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return bool(a == b)


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor {v.dtype}{list(v.shape)}"
    return repr(v)


@dataclass(frozen=True, eq=False)
class Graph:
    """A model as nodes over values; see the module docstring.

    ``values`` maps every value name (inputs, constants, node outputs) to its :class:`Value`;
    ``constants`` maps constant names to read-only arrays; ``inputs`` and ``outputs`` are the
    graph's, in the model's order.
    """

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    values: Mapping[str, Value]
    constants: Mapping[str, np.ndarray]

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "values", types.MappingProxyType(dict(self.values)))
        object.__setattr__(
            self, "constants", types.MappingProxyType({k: _freeze(np.asarray(v)) for k, v in self.constants.items()})
        )

    # -- queries --------------------------------------------------------------------------

    def producer(self, value: str) -> Node | None:
        """The node writing ``value`` (None for a graph input or a constant)."""
        return self._producers().get(value)

    def consumers(self, value: str) -> list[Node]:
        """The nodes reading ``value``, in graph order."""
        return self._consumers().get(value, [])

    def is_constant(self, value: str) -> bool:
        return value in self.constants

    def is_output(self, value: str) -> bool:
        return any(v.name == value for v in self.outputs)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def _producers(self) -> dict[str, Node]:
        cached = self.__dict__.get("_producer_map")
        if cached is None:
            cached = {o: n for n in self.nodes for o in n.outputs if o}
            object.__setattr__(self, "_producer_map", cached)
        return cached

    def _consumers(self) -> dict[str, list[Node]]:
        cached = self.__dict__.get("_consumer_map")
        if cached is None:
            cached = {}
            for n in self.nodes:
                for i in dict.fromkeys(n.inputs):
                    if i:
                        cached.setdefault(i, []).append(n)
            object.__setattr__(self, "_consumer_map", cached)
        return cached

    # -- rebuilding -----------------------------------------------------------------------

    def replace(
        self,
        *,
        nodes: Iterable[Node] | None = None,
        values: Mapping[str, Value] | None = None,
        constants: Mapping[str, np.ndarray] | None = None,
        inputs: Iterable[Value] | None = None,
        outputs: Iterable[Value] | None = None,
    ) -> Graph:
        """A new graph with some parts replaced; values and constants nothing uses are dropped."""
        nodes = tuple(self.nodes if nodes is None else nodes)
        values = dict(self.values if values is None else values)
        constants = dict(self.constants if constants is None else constants)
        inputs = tuple(self.inputs if inputs is None else inputs)
        outputs = tuple(self.outputs if outputs is None else outputs)
        used = {v.name for v in inputs} | {v.name for v in outputs}
        for n in nodes:
            used.update(i for i in n.inputs if i)
            used.update(o for o in n.outputs if o)
        return Graph(
            self.name,
            nodes,
            inputs,
            outputs,
            {k: v for k, v in values.items() if k in used},
            {k: v for k, v in constants.items() if k in used},
        )

    def __str__(self) -> str:
        lines = [f"Graph {self.name}"]
        lines += [f"  input  {v}" for v in self.inputs]
        lines += [f"  const  {self.values[k]}" for k in self.constants if k in self.values]
        lines += [f"  {n}" for n in self.nodes]
        lines += [f"  output {v}" for v in self.outputs]
        return "\n".join(lines)

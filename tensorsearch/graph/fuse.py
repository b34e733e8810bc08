"""Operator fusion and task extraction (TVM's FuseOps and ExtractTask).

:func:`fuse` cuts a graph into *groups*, each lowered to one kernel. Seeds are taken in graph
order, convolutions and matmuls (``ANCHOR``) first, then reductions, then what is left; a group
grows from its seed over injective consumers (bias, activation, residual add, requantize,
reshape and transpose of the result) as long as

* every input of the new node comes from the group or from a value that does not depend on
  the group (at the granularity of groups already made: no cycle between kernels), and
* the group stays within :data:`MAX_GROUP_NODES` nodes;

then it is cut back to the longest prefix whose values leave the group through as few outputs
as the seed alone has. A ResNet bottleneck's last block becomes::

    conv3 = Conv(x2, W3, b3); a = Add(conv3, x); y = Relu(a)    ->   one kernel: conv2d_nhwc, bias, add, relu

Padding is part of a convolution's own lowering (its injective producer, in the same kernel).

:func:`extract_tasks` lowers every group (:func:`~.lowering.lower_nodes`) and deduplicates the
kernels by structural hash: a :class:`Task` is one distinct PrimFunc with its *weight* (how many
kernels of the model are that function), FLOPs and multiply-accumulates per call::

    kernels, tasks = extract_tasks(prepare(from_onnx(model)))
    for t in tasks: print(t.name, t.weight, t.flops)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..arith import count_macs, count_ops
from ..ir import PrimFunc, structural_hash
from .ir import Graph, GraphError, Node
from .lowering import LoweredGroup, lower_nodes
from .registry import OpKind, lowering_of

__all__ = ["MAX_GROUP_NODES", "Group", "Kernel", "Task", "extract_tasks", "fuse", "task_key"]

MAX_GROUP_NODES = 32


@dataclass(frozen=True)
class Group:
    """Nodes (in graph order) that become one kernel, and the values it hands on."""

    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        """``fused_conv_add_relu``: the op types, in order, without repeats in a row."""
        ops: list[str] = []
        for n in self.nodes:
            op = _snake(n.op)
            if not ops or ops[-1] != op:
                ops.append(op)
        name = "fused_" + "_".join(ops)
        return name if len(name) <= 60 else name[:52] + f"_{len(ops)}ops"


def _snake(op: str) -> str:
    out = []
    for k, ch in enumerate(op):
        if ch.isupper() and k and not op[k - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _kind(node: Node) -> OpKind:
    lowering = lowering_of(node.op)
    if lowering is None:
        raise GraphError(f"{node.where}: no lowering for operator {node.op}")
    return lowering.kind


class _Fuser:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.index = {n.name: k for k, n in enumerate(graph.nodes)}
        self.group_of: dict[int, int] = {}  # node index -> group id
        self.members: list[list[int]] = []
        self.consumers = [
            sorted({self.index[c.name] for o in n.outputs if o for c in graph.consumers(o)}) for n in graph.nodes
        ]
        self.kinds = [_kind(n) for n in graph.nodes]

    def run(self) -> list[Group]:
        order = sorted(range(len(self.graph.nodes)), key=lambda k: (_seed_rank(self.kinds[k]), k))
        for k in order:
            if k not in self.group_of:
                self._grow(k)
        return self._ordered_groups()

    def _producers(self, k: int) -> list[int]:
        node = self.graph.nodes[k]
        out = []
        for i in node.inputs:
            p = self.graph.producer(i) if i else None
            if p is not None:
                out.append(self.index[p.name])
        return out

    def _reaches(self, group: set[int], targets: set[int]) -> bool:
        """Whether any node of ``targets`` depends on ``group`` (groups already made count as
        one unit: reaching one member reaches all of them)."""
        seen: set[int] = set()
        stack = [c for m in group for c in self.consumers[m] if c not in group]
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            if k in targets:
                return True
            g = self.group_of.get(k)
            nxt = list(self.consumers[k]) + (self.members[g] if g is not None else [])
            stack.extend(c for c in nxt if c not in seen and c not in group)
        return False

    def _grow(self, seed: int) -> None:
        group = [seed]
        members = {seed}
        if self.kinds[seed] != OpKind.OPAQUE:
            for k in range(seed + 1, len(self.graph.nodes)):
                if len(group) >= MAX_GROUP_NODES:
                    break
                if k in self.group_of or self.kinds[k] != OpKind.INJECTIVE:
                    continue
                prods = self._producers(k)
                if not any(p in members for p in prods):
                    continue
                outside = {p for p in prods if p not in members}
                if outside and self._reaches(members, outside):
                    continue
                group.append(k)
                members.add(k)
        group = self._trim(group)
        gid = len(self.members)
        self.members.append(group)
        for k in group:
            self.group_of[k] = gid

    def _escaping(self, group: Sequence[int]) -> list[str]:
        inside = set(group)
        out = []
        for k in group:
            for o in self.graph.nodes[k].outputs:
                if not o:
                    continue
                users = {self.index[c.name] for c in self.graph.consumers(o)}
                if self.graph.is_output(o) or users - inside:
                    out.append(o)
        return out

    def _trim(self, group: list[int]) -> list[int]:
        if len(group) == 1:
            return group
        allowed = max(1, len(self._escaping(group[:1])))
        for end in range(len(group), 1, -1):
            if len(self._escaping(group[:end])) <= allowed:
                return group[:end]
        return group[:1]

    def _ordered_groups(self) -> list[Group]:
        """Groups in an order where each runs after the groups it reads from."""
        deps: list[set[int]] = [set() for _ in self.members]
        for gid, group in enumerate(self.members):
            for k in group:
                for p in self._producers(k):
                    if self.group_of[p] != gid:
                        deps[gid].add(self.group_of[p])
        done: list[int] = []
        state = [0] * len(self.members)

        def visit(g: int) -> None:
            if state[g] == 2:
                return
            if state[g] == 1:
                raise GraphError("fusion made a cycle between kernels (a bug in the fuser)")
            state[g] = 1
            for d in sorted(deps[g]):
                visit(d)
            state[g] = 2
            done.append(g)

        for g in sorted(range(len(self.members)), key=lambda g: min(self.members[g])):
            visit(g)
        out = []
        for g in done:
            group = sorted(self.members[g])
            out.append(Group(tuple(self.graph.nodes[k] for k in group), tuple(self._escaping(group))))
        return out


def _seed_rank(kind: OpKind) -> int:
    return {OpKind.ANCHOR: 0, OpKind.REDUCTION: 1, OpKind.OPAQUE: 2, OpKind.INJECTIVE: 2}[kind]


def fuse(graph: Graph) -> list[Group]:
    """The groups of ``graph`` in an order that runs them (see the module docstring)."""
    return _Fuser(graph).run()


# ---------------------------------------------------------------------------------------------
# tasks


def task_key(func: PrimFunc) -> str:
    """A kernel's structural hash as 16 hex digits (the tuning database's workload key)."""
    return f"{structural_hash(func):016x}"


@dataclass(frozen=True)
class Kernel:
    """One group of the model, lowered: which task it runs and the graph values it binds."""

    group: Group
    lowered: LoweredGroup
    task: str  # the task's key


@dataclass(frozen=True)
class Task:
    """A distinct kernel of the model: its PrimFunc, how many kernels run it, its arithmetic."""

    key: str
    name: str
    func: PrimFunc
    weight: int
    flops: int  # arithmetic operations on data per call (a multiply-add is 2)
    macs: int  # multiply-accumulates per call (convolution and matmul reductions)
    anchor: str  # the op type of the group's seed

    @property
    def total_flops(self) -> int:
        return self.weight * self.flops


def extract_tasks(graph: Graph) -> tuple[list[Kernel], list[Task]]:
    """Fuse, lower every group, and deduplicate the kernels into tasks (first use first)."""
    kernels: list[Kernel] = []
    tasks: dict[str, Task] = {}
    for group in fuse(graph):
        lowered = lower_nodes(graph, group.nodes, group.outputs, name=group.name)
        key = task_key(lowered.func)
        kernels.append(Kernel(group, lowered, key))
        if key in tasks:
            t = tasks[key]
            tasks[key] = Task(t.key, t.name, t.func, t.weight + 1, t.flops, t.macs, t.anchor)
        else:
            f = lowered.func
            tasks[key] = Task(key, group.name, f, 1, count_ops(f), count_macs(f), group.nodes[0].op)
    return kernels, list(tasks.values())

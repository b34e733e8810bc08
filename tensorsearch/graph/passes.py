"""Graph-to-graph passes run before fusion, and the pipeline that runs them.

* :func:`remove_dead_nodes`: nodes whose outputs nothing reads (and no graph output is) go.

* :func:`remove_identities`: ``Identity`` and inference ``Dropout`` nodes go; their consumers
  read the input instead (a graph output keeps its name through a copy)::

      b = Identity(a); c = Relu(b)        ->    c = Relu(a)

* :func:`fold_batch_norm`: a ``BatchNormalization`` whose input is a convolution's only use,
  with constant weights and statistics, becomes the convolution's weights and bias, computed
  at compile time (``s = gamma / sqrt(var + eps)``; ``W' = W * s`` per output channel;
  ``b' = (b - mean) * s + beta``)::

      y = Conv(x, W); z = BatchNormalization(y, gamma, beta, mean, var)
      ->   z = Conv(x, W', b')

* :func:`prepare`: the pipeline: dead nodes, identities, int8 QDQ folding (:mod:`.quant`), batch-norm
  folding, NHWC layout (:mod:`.layout`).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module

import numpy as np

from .ir import Graph, Node, Value

__all__ = ["fold_batch_norm", "prepare", "remove_dead_nodes", "remove_identities"]

_IDENTITIES = {"Identity", "Dropout"}


def remove_dead_nodes(graph: Graph) -> Graph:
    """Drop the nodes whose results are never used (walking back from the graph's outputs)."""
    live = {v.name for v in graph.outputs}
    kept: list[Node] = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=reversed(kept))


def remove_identities(graph: Graph) -> Graph:
    """Drop Identity/Dropout nodes (see the module docstring)."""
    rename: dict[str, str] = {}
    nodes: list[Node] = []
    outputs = {v.name for v in graph.outputs}
    for node in graph.nodes:
        ins = tuple(rename.get(i, i) for i in node.inputs)
        drop = node.op in _IDENTITIES and len([o for o in node.outputs if o]) == 1 and node.outputs[0] not in outputs
        if drop and (node.op == "Identity" or _inference_dropout(node, graph)):
            rename[node.outputs[0]] = ins[0]
            continue
        nodes.append(node.with_(inputs=ins) if ins != node.inputs else node)
    return graph.replace(nodes=nodes)


def _inference_dropout(node: Node, graph: Graph) -> bool:
    if len(node.outputs) > 1 and node.outputs[1]:
        return False  # the mask is used
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    return not training or bool(np.all(graph.constants.get(training, np.array(True)) == 0))


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold BatchNormalization into the convolution before it (see the module docstring)."""
    replaced: dict[str, Node] = {}  # conv name -> folded conv
    dropped: set[str] = set()
    constants = dict(graph.constants)
    values = dict(graph.values)
    for bn in graph.nodes:
        conv = _foldable(graph, bn)
        if conv is None:
            continue
        scale, beta = _bn_affine(graph, bn)
        w = graph.constants[conv.inputs[1]].astype(np.float64)
        w_new = (w * scale.reshape((w.shape[0],) + (1,) * (w.ndim - 1))).astype(np.float32)
        b_old = graph.constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
        b_new = ((b_old - _const(graph, bn, 3)) * scale + beta).astype(np.float32)
        wname, bname = f"{conv.inputs[1]}__bn_{bn.name}", f"{bn.outputs[0]}__bias"
        constants[wname], constants[bname] = w_new, b_new
        values[wname] = Value(wname, tuple(w_new.shape), "float32")
        values[bname] = Value(bname, tuple(b_new.shape), "float32")
        replaced[conv.name] = conv.with_(inputs=(conv.inputs[0], wname, bname), outputs=(bn.outputs[0],))
        dropped.add(bn.name)
    if not replaced:
        return graph
    nodes = [replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped]
    return graph.replace(nodes=nodes, values=values, constants=constants)


def _foldable(graph: Graph, bn: Node) -> Node | None:
    if bn.op != "BatchNormalization" or bn.attr("training_mode", 0) or len([o for o in bn.outputs if o]) != 1:
        return None
    conv = graph.producer(bn.inputs[0])
    if conv is None or conv.op != "Conv" or "layout" in conv.attrs:
        return None
    if len(graph.consumers(bn.inputs[0])) != 1 or graph.is_output(bn.inputs[0]):
        return None
    params = list(bn.inputs[1:5]) + list(conv.inputs[1:])
    if not all(p and graph.is_constant(p) for p in params):
        return None
    return conv if graph.values[bn.inputs[0]].dtype == "float32" else None


def _const(graph: Graph, node: Node, k: int) -> np.ndarray:
    return graph.constants[node.inputs[k]].astype(np.float64)


def _bn_affine(graph: Graph, bn: Node) -> tuple[np.ndarray, np.ndarray]:
    gamma, var = _const(graph, bn, 1), _const(graph, bn, 4)
    scale = gamma / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    return scale, _const(graph, bn, 2)


def _optional_pass(module: str, name: str) -> Callable[[Graph], Graph] | None:
    try:
        return getattr(import_module(module, __package__), name)
    except ModuleNotFoundError as err:
        if err.name != f"{__package__}{module}":
            raise
        return None


def prepare(graph: Graph, *, layout: str = "NHWC") -> Graph:
    """The passes a graph goes through before fusion, in order; ``layout="NCHW"`` keeps the
    model's layout (no :func:`~.layout.to_nhwc`)."""
    graph = remove_identities(remove_dead_nodes(graph))
    fold_qdq = _optional_pass(".quant", "fold_qdq")
    if fold_qdq is not None:
        graph = fold_qdq(graph)
    graph = fold_batch_norm(graph)
    if layout == "NHWC":
        to_nhwc = _optional_pass(".layout", "to_nhwc")
        if to_nhwc is not None:
            graph = to_nhwc(graph)
    elif layout != "NCHW":
        raise ValueError(f"layout must be NHWC or NCHW, got {layout!r}")
    return graph

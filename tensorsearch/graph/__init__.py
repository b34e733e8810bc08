"""The model layer: ONNX models in, kernels and a graph executor out.

    import tensorsearch as ts
    graph = ts.graph.from_onnx("model.onnx", input_shapes={"input_ids": (1, 128)})
    graph = ts.graph.prepare(graph)                 # identities, int8 QDQ folding, BN folding, NHWC
    kernels, tasks = ts.graph.extract_tasks(graph)  # fused PrimFuncs, deduplicated into weighted tasks
    exe = ts.compile_model(graph, "host")           # the search layer compiles; the executor runs

Modules: ``ir`` (Graph, Node, Value), ``onnx_import``, ``registry`` (the op -> lowering table),
``ops_nn`` / ``ops_tensor`` / ``quant`` (the lowerings), ``lowering`` (a group of nodes to a
PrimFunc), ``passes`` and ``layout`` (graph rewrites), ``fuse`` (fusion and tasks),
``executor`` (buffer plan and runs), ``models`` (built-in models). Submodules load on first use,
so ``import tensorsearch.graph`` does not import onnx.
"""

from importlib import import_module
from typing import Any

_SUBMODULES = (
    "executor",
    "fuse",
    "ir",
    "layout",
    "lowering",
    "models",
    "onnx_import",
    "ops_nn",
    "ops_tensor",
    "passes",
    "quant",
    "registry",
)
_NAMES = {
    "Graph": "ir",
    "GraphError": "ir",
    "Node": "ir",
    "Value": "ir",
    "from_onnx": "onnx_import",
    "prepare": "passes",
    "extract_tasks": "fuse",
    "Task": "fuse",
    "GraphExecutor": "executor",
    "supported_ops": "registry",
}

__all__ = [*_SUBMODULES, *_NAMES]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'tensorsearch.graph' has no attribute {name!r}")

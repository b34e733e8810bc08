"""Random small ONNX graphs of the supported operators (chains and branches, random shapes and
attributes) import, compile with default schedules and match onnxruntime.

Each example is drawn from its own seed (``_random_model(seed)``), so a failure names the seed
that reproduces it. The test asserts it checked every example and met a wide mix of operators.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from graph_util import model, random_feeds, run_ort
from onnx import helper

import tensorsearch as ts

pytestmark = pytest.mark.slow  # every test here: see pyproject.toml's markers

EXAMPLES = 60
MIN_OP_TYPES = 20


class _Builder:
    """A growing model: a pool of (value name, shape), nodes and constants."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pool: list[tuple[str, tuple[int, ...]]] = []
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.used: set[str] = set()
        self.n = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, shape: tuple[int, ...], scale: float = 0.5) -> str:
        name = self.name("c")
        self.inits[name] = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return name

    def pick(self, rank: int | None = None, min_hw: int = 1) -> tuple[str, tuple[int, ...]] | None:
        fits = [
            (n, s) for n, s in self.pool if (rank is None or len(s) == rank) and (len(s) != 4 or min(s[2:]) >= min_hw)
        ]
        return fits[self.rng.integers(len(fits))] if fits else None

    def add(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> None:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"/{op}_{self.n}", **attrs))
        self.used.update(inputs)
        self.pool.append((out, shape))


def _unary(b: _Builder) -> bool:
    x, s = b.pick()
    op = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Erf"][b.rng.integers(6)]
    b.add(op, [x], s)
    return True


def _binary(b: _Builder) -> bool:
    x, s = b.pick()
    same = [n for n, t in b.pool if t == s and n != x]
    op = ["Add", "Sub", "Mul", "Max"][b.rng.integers(4)]
    if same and b.rng.random() < 0.6:
        b.add(op, [x, same[b.rng.integers(len(same))]], s)
    else:  # a broadcast constant: per channel for 4-D, along the last axis otherwise
        cshape = (s[1], 1, 1) if len(s) == 4 else (s[-1],)
        b.add(op, [x, b.const(cshape)], s)
    return True


def _conv(b: _Builder) -> bool:
    got = b.pick(4, min_hw=3)
    if got is None:
        return False
    x, (n, c, h, w) = got
    k, pad, stride = int(b.rng.choice([1, 3])), int(b.rng.integers(0, 2)), int(b.rng.choice([1, 2]))
    depthwise = b.rng.random() < 0.25
    cout, groups = (c, c) if depthwise else (int(b.rng.integers(2, 9)), 1)
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    inputs = [x, b.const((cout, c // groups, k, k))] + ([b.const((cout,))] if b.rng.random() < 0.7 else [])
    b.add("Conv", inputs, (n, cout, ho, wo), kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2, group=groups)
    return True


def _pool(b: _Builder) -> bool:
    got = b.pick(4, min_hw=2)
    if got is None:
        return False
    x, (n, c, h, w) = got
    kind = int(b.rng.integers(3))
    if kind == 2:
        b.add("GlobalAveragePool", [x], (n, c, 1, 1))
    else:
        op = "MaxPool" if kind == 0 else "AveragePool"
        b.add(op, [x], (n, c, h // 2, w // 2), kernel_shape=[2, 2], strides=[2, 2])
    return True


def _batch_norm(b: _Builder) -> bool:
    got = b.pick(4)
    if got is None:
        return False
    x, s = got
    c = s[1]
    var = b.const((c,))
    b.inits[var] = np.abs(b.inits[var]) + 0.5
    b.add("BatchNormalization", [x, b.const((c,)), b.const((c,)), b.const((c,)), var], s)
    return True


def _matmul(b: _Builder) -> bool:
    got = b.pick(2) or b.pick(3)
    if got is None:
        return False
    x, s = got
    nout = int(b.rng.integers(2, 17))
    if len(s) == 2 and b.rng.random() < 0.5:
        b.add("Gemm", [x, b.const((nout, s[-1])), b.const((nout,))], (s[0], nout), transB=1)
    else:
        b.add("MatMul", [x, b.const((s[-1], nout))], (*s[:-1], nout))
    return True


def _reduce_like(b: _Builder) -> bool:
    x, s = b.pick()
    kind = int(b.rng.integers(3))
    if kind == 0:
        b.add("Softmax", [x], s, axis=-1)
    elif kind == 1:
        b.add("ReduceMean", [x], (*s[:-1], 1), axes=[-1], keepdims=1)
    else:
        b.add("LayerNormalization", [x, b.const((s[-1],)), b.const((s[-1],))], s, axis=-1, epsilon=1e-5)
    return True


def _layout(b: _Builder) -> bool:
    x, s = b.pick()
    kind = int(b.rng.integers(3))
    if kind == 0 and len(s) >= 2:
        perm = list(b.rng.permutation(len(s)))
        b.add("Transpose", [x], tuple(s[p] for p in perm), perm=perm)
    elif kind == 1 and len(s) == 4:
        b.add("Flatten", [x], (s[0], int(np.prod(s[1:]))), axis=1)
    elif len(s) >= 2:
        shape = (*s[:-2], s[-2] * s[-1])
        name = b.name("shape")
        b.inits[name] = np.array(shape, np.int64)
        b.add("Reshape", [x, name], shape)
    else:
        return False
    return True


def _concat_slice(b: _Builder) -> bool:
    x, s = b.pick()
    same = [n for n, t in b.pool if t == s]
    if b.rng.random() < 0.5 and len(s) >= 2:
        y = same[b.rng.integers(len(same))]
        b.add("Concat", [x, y], (*s[:1], 2 * s[1], *s[2:]), axis=1)
    else:
        end = max(1, s[-1] - 1)
        names = [b.name("s") for _ in range(3)]
        for name, v in zip(names, ([0], [end], [len(s) - 1]), strict=True):
            b.inits[name] = np.array(v, np.int64)
        b.add("Slice", [x, *names], (*s[:-1], end))
    return True


STEPS: list[Callable[[_Builder], bool]] = [
    _unary,
    _binary,
    _conv,
    _conv,
    _pool,
    _batch_norm,
    _matmul,
    _reduce_like,
    _layout,
    _concat_slice,
]


def _random_model(seed: int):
    rng = np.random.default_rng(seed)
    b = _Builder(rng)
    inputs = {}
    if rng.random() < 0.6:
        shape = (1, int(rng.integers(2, 7)), int(rng.integers(3, 8)), int(rng.integers(3, 8)))
    else:
        shape = tuple(int(d) for d in rng.integers(2, 9, size=int(rng.integers(2, 4))))
    inputs["x"] = ("float32", shape)
    b.pool.append(("x", shape))
    steps = int(rng.integers(3, 7))
    done = 0
    while done < steps:
        if STEPS[rng.integers(len(STEPS))](b):
            done += 1
    outs = [n for n, _ in b.pool if n not in b.used and n != "x"][:3]
    return model(b.nodes, inputs, outs, b.inits)


def test_random_graphs_compile_and_match_onnxruntime():
    seen_ops: set[str] = set()
    checked = 0
    for seed in range(EXAMPLES):
        m = _random_model(seed)
        feeds = random_feeds(m, seed)
        want = run_ort(m, feeds)
        try:
            exe = ts.compile_model(m, None)
            got = exe(**feeds)
        except Exception as err:
            pytest.fail(f"seed {seed}: {type(err).__name__}: {err}")
        for g, w in zip(got, want, strict=True):
            scale = float(np.max(np.abs(w))) or 1.0
            err = float(np.max(np.abs(g - w))) / scale
            assert g.shape == w.shape and err <= 1e-4, f"seed {seed}: error {err:.2e} of the output scale"
        seen_ops.update(n.op_type for n in m.graph.node)
        checked += 1
    assert checked == EXAMPLES
    assert len(seen_ops) >= MIN_OP_TYPES, sorted(seen_ops)

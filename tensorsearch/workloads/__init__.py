"""The paper's operator workloads: every operator of TVM MetaSchedule's te_workload table
(``python/tvm/meta_schedule/testing/te_workload.py``) with its four shapes.

    from tensorsearch import workloads
    workloads.names()                      # ['C1D', 'C2D', ..., 'C2D_WIN_NHWC']
    wl = workloads.get("C2D", 2, "int8")   # a Workload: args, func (PrimFunc), flops, ...
    small = workloads.reduced("C2D", 2)    # same structure, shapes an interpreter runs in ~1 s
    xs = small.make_inputs(np.random.default_rng(0))
    want = small.reference(*xs)            # numpy outputs

Data types (``dtype``):

- ``"float32"`` (default): every tensor float32.
- ``"float16"``: float16 data and weights; reductions accumulate in float32 and the outputs
  are float32; elementwise float math (exp, sqrt, bias, batch-norm) runs in float32 after a
  cast.  Per-channel parameters (CBR's bias/bn_scale/bn_offset) stay float32.
- ``"bfloat16"``: as ``"float16"`` with bfloat16 data and weights (the form of AVX512-BF16
  ``vdpbf16ps`` and AMX ``tdpbf16ps`` units); numpy arrays of ``ml_dtypes.bfloat16``.
- ``"int8"``: uint8 data times int8 weights, both cast to int32 before multiplying,
  accumulated in int32; int32 outputs.  Only for the convolutions and matrix products
  (C1D C2D C3D CAP DEP DIL GMM GRP T2D TBG); NRM, SFM, CBR and C2D_WIN_NHWC are float only.
- ``"int16"``: int16 data and weights, cast to int32 before multiplying, accumulated in int32
  (the form of AVX512-VNNI ``vpdpwssd`` and ``pmaddwd`` units); the same operators as int8.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .definitions import FORMS, Form
from .reference import winograd_kernel_pack
from .table import SPECS, ArgumentError, Spec, TensorSpec

if TYPE_CHECKING:
    from ..ir import Buffer, PrimFunc

__all__ = [
    "ArgumentError",
    "TensorSpec",
    "Workload",
    "WorkloadError",
    "describe",
    "dtypes",
    "get",
    "make",
    "names",
    "reduced",
    "reduced_args",
    "shapes",
]


class WorkloadError(ValueError):
    """An unknown workload, shape index or data type; the message lists the valid ones."""


def names() -> list[str]:
    """The workload names, in the order of the paper's table."""
    return list(SPECS)


def _spec(name: str) -> Spec:
    spec = SPECS.get(name) or SPECS.get(str(name).upper())
    if spec is None:
        close = difflib.get_close_matches(str(name).upper(), list(SPECS), n=1, cutoff=0.5)
        hint = f"did you mean {close[0]}? " if close else ""
        raise WorkloadError(f"unknown workload {name!r}; {hint}the workloads are {', '.join(SPECS)}")
    return spec


def shapes(name: str) -> list[tuple[int, ...]]:
    """The argument tuples of the workload's table shapes (index 0, 1, ...)."""
    return list(_spec(name).shapes)


def arg_names(name: str) -> tuple[str, ...]:
    """The names of the workload's arguments, in order."""
    return _spec(name).arg_names


def dtypes(name: str) -> tuple[str, ...]:
    """The data-type forms the workload supports."""
    return _spec(name).dtypes


def describe(name: str) -> str:
    """One line: the computation and its layout."""
    return _spec(name).computation


def _index(spec: Spec, index: int) -> int:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(spec.shapes):
        valid = ", ".join(f"{i}: {s}" for i, s in enumerate(spec.shapes))
        raise WorkloadError(f"workload {spec.name} has no shape index {index!r}; valid indices are {valid}")
    return index


def reduced_args(name: str, index: int = 0) -> tuple[int, ...]:
    """A small version of shape ``index``: the same kernel, stride, padding, dilation and groups
    with small spatial and channel extents, so that the interpreter runs it in about a second."""
    spec = _spec(name)
    return spec.reduced[_index(spec, index)]


def _check_dtype(spec: Spec, dtype: str) -> str:
    if dtype not in spec.dtypes:
        raise WorkloadError(
            f"workload {spec.name} does not support dtype {dtype!r}; it supports {', '.join(spec.dtypes)}"
        )
    return dtype


def _check_args(spec: Spec, args: tuple) -> tuple[int, ...]:
    args = tuple(args)
    if len(args) != len(spec.arg_names) or not all(isinstance(a, int | np.integer) for a in args):
        raise WorkloadError(
            f"workload {spec.name} takes {len(spec.arg_names)} integer arguments "
            f"({', '.join(spec.arg_names)}), got {args!r}"
        )
    args = tuple(int(a) for a in args)
    spec.check(args)
    return args


def get(name: str, index: int = 0, dtype: str = "float32") -> Workload:
    """Workload ``name`` at table shape ``index`` in data-type form ``dtype``."""
    spec = _spec(name)
    return Workload(spec.name, _index(spec, index), _check_dtype(spec, dtype), spec.shapes[index])


def make(name: str, args: tuple, dtype: str = "float32") -> Workload:
    """Workload ``name`` with custom arguments (``index`` is None)."""
    spec = _spec(name)
    return Workload(spec.name, None, _check_dtype(spec, dtype), _check_args(spec, args))


def reduced(name: str, index: int = 0, dtype: str = "float32") -> Workload:
    """``make(name, reduced_args(name, index), dtype)``."""
    return make(name, reduced_args(name, index), dtype)


def _numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of an element type; bfloat16 is ml_dtypes' (numpy has none)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


@dataclass(frozen=True)
class Workload:
    """One instance of a workload: a name, its arguments and a data-type form.

    ``func`` (the PrimFunc, built on first use) takes the inputs then the outputs, in the
    order of ``inputs`` and ``outputs``.
    """

    name: str
    index: int | None
    dtype: str
    args: tuple[int, ...]

    @property
    def spec(self) -> Spec:
        return SPECS[self.name]

    @property
    def form(self) -> Form:
        return FORMS[self.dtype]

    @property
    def computation(self) -> str:
        return self.spec.computation

    @property
    def arg_names(self) -> tuple[str, ...]:
        return self.spec.arg_names

    @property
    def key(self) -> str:
        """A readable identifier: ``C2D/2/int8`` for a table shape, ``C2D(1,4,4,...)/int8`` else."""
        if self.index is not None:
            return f"{self.name}/{self.index}/{self.dtype}"
        return f"{self.name}({','.join(map(str, self.args))})/{self.dtype}"

    def te_tensors(self) -> list:
        """Fresh te tensors of the definition, in parameter order."""
        return self.spec.build(self.args, self.form)

    @cached_property
    def func(self) -> PrimFunc:
        from .. import te

        return te.create_prim_func(self.te_tensors())

    @cached_property
    def _io(self) -> tuple[list[TensorSpec], list[TensorSpec]]:
        return self.spec.io(self.args, self.form)

    @property
    def inputs(self) -> list[TensorSpec]:
        """The input parameters (name, shape, dtype, role), in parameter order."""
        return list(self._io[0])

    @property
    def outputs(self) -> list[TensorSpec]:
        """The output parameters, after the inputs in parameter order."""
        return list(self._io[1])

    @property
    def input_buffers(self) -> tuple[Buffer, ...]:
        return self.func.buffers[: len(self._io[0])]

    @property
    def output_buffers(self) -> tuple[Buffer, ...]:
        return self.func.buffers[len(self._io[0]) :]

    @property
    def flops(self) -> int:
        """Arithmetic operations of one run (a multiply-add counts 2).  Convolutions count the
        products the definition performs (T2D: every kernel tap over the dilated input);
        C2D_WIN_NHWC counts the equivalent direct 3x3 convolution, the usual convention."""
        return int(self.spec.flops(self.args))

    @property
    def reduction_size(self) -> int:
        """About how many terms each output element sums (for error tolerances)."""
        n_out = sum(math.prod(o.shape) for o in self._io[1])
        return max(1, self.flops // (2 * n_out))

    def make_inputs(self, rng: np.random.Generator | int | None = None) -> list[np.ndarray]:
        """Random inputs in parameter order (outputs excluded), never all zeros.

        Floats: uniform in [-1, 1) (rounded to bfloat16 or float16).  int8 form: data uniform over
        uint8 [0, 255], weights over int8 [-128, 127]; int16 form: both uniform over [-256, 255]
        (in both, every table shape's int32 accumulation stays in range).
        C2D_WIN_NHWC's ``weight`` is the Winograd transform of a random 3x3 kernel, so the
        output is the direct convolution with that kernel.
        """
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        arrays = []
        for t in self._io[0]:
            if t.dtype == "uint8":
                a = rng.integers(0, 256, size=t.shape, dtype=np.uint8)
            elif t.dtype == "int8":
                a = rng.integers(-128, 128, size=t.shape, dtype=np.int8)
            elif t.dtype == "int16":
                a = rng.integers(-256, 256, size=t.shape, dtype=np.int16)
            elif t.role == "kernel_pack":
                alpha, _, co, ci = t.shape
                g = rng.uniform(-1.0, 1.0, size=(alpha - 3, alpha - 3, ci, co))
                a = np.ascontiguousarray(winograd_kernel_pack(g).astype(_numpy_dtype(t.dtype)))
            else:
                a = rng.uniform(-1.0, 1.0, size=t.shape).astype(_numpy_dtype(t.dtype))
            arrays.append(a)
        return arrays

    def reference(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """The outputs computed by numpy (exact for the int8 form)."""
        specs = self._io[0]
        if len(inputs) != len(specs):
            raise WorkloadError(f"{self.key}: reference takes {len(specs)} inputs ({', '.join(s.name for s in specs)})")
        arrays = []
        for x, s in zip(inputs, specs, strict=True):
            x = np.asarray(x)
            if tuple(x.shape) != s.shape or str(x.dtype) != s.dtype:
                raise WorkloadError(
                    f"{self.key}: input {s.name} must be {s.dtype}{list(s.shape)}, got {x.dtype}{list(x.shape)}"
                )
            arrays.append(x)
        outs = self.spec.reference(self.args, arrays)
        return [o.astype(s.dtype) for o, s in zip(outs, self._io[1], strict=True)]

    @property
    def tolerance(self) -> tuple[float, float]:
        """``(rtol, atol)`` for comparing computed outputs with ``reference``: exact for integer
        outputs; for float32 accumulation ~1e-5, widened with the square root of the number of
        summed terms.  ``atol`` is relative to 1 (scale it by the outputs' magnitude)."""
        if self.form.acc.startswith("int"):
            return 0.0, 0.0
        widen = max(1.0, math.sqrt(self.reduction_size) / 8)
        return 1e-5 * widen, 1e-5 * widen

    def check(self, actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
        """Raise AssertionError naming the output when ``actual`` differs from ``expected``."""
        rtol, atol = self.tolerance
        for got, want, s in zip(actual, expected, self._io[1], strict=True):
            got = np.asarray(got)
            if got.shape != want.shape:
                raise AssertionError(f"{self.key}: output {s.name} has shape {got.shape}, expected {want.shape}")
            if rtol == 0 and atol == 0:
                np.testing.assert_array_equal(got, want, err_msg=f"{self.key}: output {s.name}")
            else:
                scale = max(1.0, float(np.abs(want).max()))
                np.testing.assert_allclose(
                    got, want, rtol=rtol, atol=atol * scale, err_msg=f"{self.key}: output {s.name}"
                )

    def __str__(self) -> str:
        return f"{self.key}: {self.computation}"

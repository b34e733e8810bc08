"""Property-based differential test of compiled code: random schedules, built natively, agree with the interpreter.

The schedule fuzz (tests/test_schedule_fuzz.py) extended to native code: random sequences of
schedule primitives are applied to small workloads; a primitive either succeeds or raises a
ScheduleError that leaves the schedule untouched; every schedule that validates is lowered,
compiled to LLVM and run on fresh random inputs (outputs pre-filled with NaN/garbage), and must
compute the workload's numpy reference (integers exactly, floats within the workload's
tolerance) without touching its inputs. On a mismatch the interpreter runs the lowered program
to tell whether lowering (or the schedule) or code generation is wrong.
Extra steps make loop kinds (parallel, vectorize, unroll) land on innermost and outermost loops
so that vector code, unrolled code and OpenMP regions really get exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from schedule_util import StepTally
from test_schedule_fuzz import MIN_SHARE, PROGRAMS, STEPS, _block_names, _pick_loops

from tensorsearch import workloads
from tensorsearch.interpreter import interpret
from tensorsearch.ir import structural_hash
from tensorsearch.runtime import build
from tensorsearch.schedule import Schedule, ScheduleError

# the schedule fuzz's programs (same shapes) and a few more: float16 data, ragged extents (vector
# tails), int8 convolution, grouped/dilated convolution, batched GEMM with transposes, Winograd
WORKLOADS = {
    "GMM": workloads.make("GMM", (1, 8, 8, 8)),
    "GMM_int8": workloads.make("GMM", (1, 4, 8, 8), "int8"),
    "C2D": workloads.make("C2D", (1, 4, 4, 4, 4, 3, 1, 1)),
    "DEP": workloads.make("DEP", (1, 4, 4, 4, 3, 1, 1)),
    "C1D": workloads.make("C1D", (1, 8, 4, 4, 3, 2, 1)),
    "NRM": workloads.make("NRM", (1, 4, 8)),
    "SFM": workloads.make("SFM", (4, 8)),
    "CBR": workloads.make("CBR", (1, 4, 4, 2, 4, 3, 1, 1)),
    "T2D": workloads.make("T2D", (1, 2, 2, 4, 2, 4, 2, 1)),
    "GMM_f16": workloads.make("GMM", (1, 4, 8, 8), "float16"),
    "GMM_ragged": workloads.make("GMM", (2, 5, 7, 6)),
    "C2D_int8": workloads.make("C2D", (1, 4, 4, 4, 4, 3, 1, 1), "int8"),
    "GRP": workloads.make("GRP", (1, 4, 4, 4, 4, 3, 1, 1, 1, 2)),
    "DIL": workloads.make("DIL", (1, 6, 6, 2, 2, 3, 1, 2, 2)),
    "TBG": workloads.make("TBG", (1, 4, 2, 4)),
    "C2D_WIN": workloads.make("C2D_WIN_NHWC", (1, 4, 4, 1, 2, 6)),
}

LOOP_KINDS = ["parallel", "vectorize", "unroll"]


def step_split_innermost(data, sch):
    """Split a short inner part (4 or 8) off the innermost loop of a block."""
    _, loops = _pick_loops(data, sch)
    if loops and int(sch.get(loops[-1]).extent.value) > 4:
        sch.split(loops[-1], [None, data.draw(st.sampled_from([4, 8]), label="inner")])


def step_innermost_kind(data, sch):
    """Vectorize or unroll the innermost loop of a block."""
    _, loops = _pick_loops(data, sch)
    if loops:
        getattr(sch, data.draw(st.sampled_from(["vectorize", "unroll", "vectorize"]), label="kind"))(loops[-1])


def step_outer_parallel(data, sch):
    """Parallelize one of the two outermost loops of a block."""
    _, loops = _pick_loops(data, sch)
    if loops:
        sch.parallel(loops[data.draw(st.integers(0, min(1, len(loops) - 1)), label="outer")])


def step_loop_kind_anywhere(data, sch):
    _, loops = _pick_loops(data, sch)
    if loops:
        getattr(sch, data.draw(st.sampled_from(LOOP_KINDS), label="kind"))(
            data.draw(st.sampled_from(loops), label="loop")
        )


def step_rfactor_any(data, sch):
    """rfactor the innermost loop that rfactor accepts of a reduction block (random choices rarely hit one)."""
    names = [n for n in _block_names(sch) if sch.get(sch.get_block(n)).init is not None]
    if not names:
        return
    for loop in reversed(sch.get_loops(sch.get_block(data.draw(st.sampled_from(names), label="block")))):
        before = sch.func
        try:
            sch.rfactor(loop, 0)
            return
        except ScheduleError:
            assert sch.func is before


LOOP_STEPS = [step_innermost_kind, step_outer_parallel, step_loop_kind_anywhere]
# the acceptance names cache_read/write, compute_at and rfactor: weigh them up
COMPILED_STEPS = [
    *STEPS,
    step_split_innermost,
    step_rfactor_any,
    *[s for s in STEPS if s.__name__ in ("step_cache", "step_compute_at", "step_sample_compute_location")],
    *LOOP_STEPS,
]

_MODULES: dict[int, object] = {}  # structural hash of a scheduled program -> its module (shrinking rebuilds less)


def _build(func):
    key = structural_hash(func)
    mod = _MODULES.get(key)
    if mod is None:
        mod = _MODULES[key] = build(func)
    return mod


def _apply(tally: StepTally, data, sch, step) -> None:
    note(f"{'applied' if tally.run(step, data, sch) else 'did not apply'} {step.__name__}")


def _fill(shape, dtype, rng):
    """Garbage for output buffers (NaN for floats), so that an element never written shows."""
    if np.dtype(dtype).kind == "f":
        return np.full(shape, np.nan, dtype)
    return rng.integers(-100, 100, size=shape).astype(dtype)


@pytest.mark.slow
def test_random_schedules_compile_and_match():
    tally = StepTally()

    @settings(max_examples=120)
    @given(data=st.data())
    def fuzz(data):
        name = data.draw(st.sampled_from(sorted(WORKLOADS)), label="program")
        wl = WORKLOADS[name]
        sch = Schedule(wl.func, seed=data.draw(st.integers(0, 2**16), label="seed"))
        for _ in range(data.draw(st.integers(1, 5), label="steps")):
            _apply(tally, data, sch, data.draw(st.sampled_from(COMPILED_STEPS), label="step"))
        # end with rfactor (sometimes) and loop kinds on innermost/outer loops, where they matter for codegen
        if data.draw(st.integers(0, 2), label="rfactor") == 0:
            _apply(tally, data, sch, step_rfactor_any)
        if data.draw(st.booleans(), label="split_innermost"):
            _apply(tally, data, sch, step_split_innermost)
        for step in data.draw(st.lists(st.sampled_from(LOOP_STEPS), min_size=1, max_size=2), label="final"):
            _apply(tally, data, sch, step)
        note(f"program {name}; trace:\n{sch.trace.as_python()}")

        mod = _build(sch.func)
        rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="input seed"))  # replayed when shrinking
        inputs = wl.make_inputs(rng)
        outputs = [_fill(o.shape, o.dtype, rng) for o in wl.outputs]
        args = [a.copy() for a in inputs] + [o.copy() for o in outputs]
        mod(*args)
        for a, b in zip(inputs, args, strict=False):
            np.testing.assert_array_equal(b, a, err_msg="an input was modified")
        expected = wl.reference(*inputs)
        try:
            wl.check(args[len(inputs) :], expected)
        except AssertionError:  # say which stage is wrong: lowering (the interpreter runs the lowered form) or codegen
            note(f"scheduled:\n{sch.func.script()}\nlowered:\n{mod.lowered.script()}")
            flat = interpret(mod.lowered, *[a.copy().reshape(-1) for a in inputs + outputs])[len(inputs) :]
            try:
                wl.check([f.reshape(e.shape) for f, e in zip(flat, expected, strict=True)], expected)
                note("the interpreter computes the lowered program correctly: codegen is wrong")
            except AssertionError:
                note("the interpreter computes the lowered program wrongly too: lowering or the schedule is wrong")
            raise

    fuzz()
    tally.check(COMPILED_STEPS, min_share=MIN_SHARE)


def test_fuzz_workloads_include_the_schedule_fuzz_programs():
    for name, func in PROGRAMS.items():
        assert structural_hash(WORKLOADS[name].func) == structural_hash(func)

"""The Apache TVM side of ``experiments/vs_tvm.py``; runs only inside the side environment's Python.

This is the one file of the repository that imports ``tvm`` (apache-tvm 0.27); ``tensorsearch``
and its tests never do. ``vs_tvm.py`` starts it as

    .tvm-env/bin/python experiments/tvm_worker.py --serve

and talks to it in JSON lines: one request per line on stdin, one reply per line on the process's
original stdout (file descriptor 1 is re-pointed at stderr at start, so TVM's own prints and logs
never corrupt the replies). Requests (``cmd``):

* ``tune``: build TVM's own te_workload function (``create_te_workload(name, index)``; for int8
  the same computation with uint8 data and int8 weights, as ``tensorsearch.workloads`` defines
  it), report its parameter shapes, tune it with ``meta_schedule.tune_tir`` (``max_trials_global``
  = trials, 64 per iteration, the given number of cores), compile the best schedule and keep the
  module; dump the scheduled TIR, its trace, the LLVM IR and the assembly into ``dump_dir``.
  With ``pack_weights`` (int8 with VNNI) the function takes its weights packed ahead where they
  fill whole VNNI blocks (below; the reply's ``weights_packed`` says whether they did).
* ``run``: load inputs from an ``.npz`` (the plain layouts; the weights re-laid here when the
  kept function takes them packed), run the kept module, save the outputs to an ``.npz``.
* ``time``: ``time_evaluator`` of the kept module on those inputs: seconds per call, each repeat's.
* ``quit``.

Two local fixes to TVM 0.27 live here:

* **The VNNI intrinsic.** TVM's shipped ``dot_16x4_vnni`` implementation calls
  ``llvm.x86.avx512.vpdpbusd.512`` with three ``<16 x i32>`` operands; LLVM 22 declares the
  intrinsic as ``(<16 x i32>, <64 x i8>, <64 x i8>)`` and rejects the module. We re-register the
  intrinsic under the same name (``override=True``; MetaSchedule's VNNI rule looks it up by
  name) with the data broadcast and reinterpreted as ``uint8x64`` and the weights loaded as
  ``int8x64``: u8 x i8 products summed four at a time into 16 int32 lanes.
* **The builder.** MetaSchedule's default build function imports ``tvm.s_tir.tensor_intrin``
  in every builder process, which parses every shipped intrinsic (35 s on a busy 2-core machine,
  past the builder's 30 s timeout: every candidate failed). Our build function does the same
  build without that import (a tensorized schedule has its intrinsics expanded already).

**Weights packed ahead for VNNI.** MetaSchedule tensorizes with ``dot_16x4_vnni`` only where
each 16 x 4 block of weights is contiguous: its plain-layout int8 GEMM and convolutions fail in
``RewriteTensorize`` ("The stmt ... doesn't match the tensor intrin"), and the tuned kernels run
without ``vpdpbusd``. TVM gets that layout from its graph level (``dense_vnni``'s and
``conv2d_NCHWc_int8``'s packed weights), not from MetaSchedule. So with ``pack_weights`` the
function takes its weights, ``(..., K, N)`` with ``K`` the reduced channels and ``N`` the output
channels, as ``(..., N/16, K/4, 16, 4)`` (``transform_layout`` on the parameter; only where
``K % 4 == 0`` and ``N % 16 == 0``), and ``run`` packs them before the call: the timed kernel
does not re-lay them, as in a model.

``python experiments/tvm_worker.py --check-vnni`` tensorizes a small u8 x i8 GEMM with the
re-registered intrinsic, compiles it for ``znver4`` (it need not run here) and checks that the
assembly has ``vpdpbusd``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np

VNNI_INTRIN = "dot_16x4_vnni"  # the name MetaSchedule's VNNI schedule rule asks for

_registered = False


def register_vnni() -> None:
    """Register ``dot_16x4_vnni`` with ``<64 x i8>`` operands (LLVM 22's vpdpbusd signature)."""
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin
    from tvm.s_tir.tensor_intrin.x86 import dot_product_16x4_u8i8i32_desc
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def vnni_impl(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            # the 4 data bytes, as one int32, in each of the 16 lanes, seen as 64 bytes
            a4 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a64 = T.reinterpret(T.broadcast(a4, 16), dtype="uint8x64")
            b64 = B.vload([0, 0], dtype="int8x64")
            c16 = C.vload([0], dtype="int32x16")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), c16, a64, b64, dtype="int32x16"
            )

    TensorIntrin.register(VNNI_INTRIN, dot_product_16x4_u8i8i32_desc, vnni_impl, override=True)
    _registered = True


def build_without_intrin_import(mod, target, _params):
    """MetaSchedule's ``default_build`` without its ``import tvm.s_tir.tensor_intrin`` (see above)."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def make_target(mcpu: str, cores: int):
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": int(cores)})


def te_func(name: str, index: int, dtype: str):
    """TVM's te_workload function for ``name``/``index``: float32 as shipped; int8 as ours.

    ``create_te_workload`` builds float32 only. For int8 we call the same workload function with
    ``in_dtype="int8", out_dtype="int32"`` and make its first placeholder (the data: ``X``,
    ``inputs``) uint8, as ``tensorsearch.workloads`` does: uint8 data times int8 weights, both
    cast to int32, summed in int32.
    """
    from tvm import te
    from tvm.s_tir.meta_schedule.testing import te_workload

    if dtype == "float32":
        return te_workload.create_te_workload(name, index)
    if dtype != "int8":
        raise ValueError(f"dtype {dtype!r}: the TVM side runs float32 and int8")
    fn, params = te_workload.CONFIGS[name]
    real = te.placeholder
    made = []

    def placeholder(shape, dtype=None, name="placeholder", *a, **k):
        if dtype == "int8" and not made:
            dtype = "uint8"
        made.append(name)
        return real(shape, dtype, name, *a, **k)

    te.placeholder = placeholder
    try:
        tensors = fn(*params[index], in_dtype="int8", out_dtype="int32")
    finally:
        te.placeholder = real
    return te.create_prim_func(tensors)


def vnni_packable(func) -> bool:
    """Whether the weights (parameter 1, ``(..., K, N)``) fill whole 16 x 4 VNNI blocks."""
    shape = [int(s) for s in func.params[1].shape]
    return len(shape) >= 2 and shape[-2] % 4 == 0 and shape[-1] % 16 == 0


def with_vnni_packed_weights(func):
    """``func`` taking its weights ``(..., K, N)`` as ``(..., N/16, K/4, 16, 4)`` (see above)."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    block = sch.get_sblock(str(func.params[-1].name))  # te.create_prim_func names it after its output
    sch.transform_layout(block, ("read", 1), lambda *i: (*i[:-2], i[-1] // 16, i[-2] // 4, i[-1] % 16, i[-2] % 4))
    return sch.mod["main"]


def pack_vnni(weights: np.ndarray) -> np.ndarray:
    """numpy's ``(..., K, N)`` -> ``(..., N/16, K/4, 16, 4)``, as :func:`with_vnni_packed_weights`."""
    *lead, k, n = weights.shape
    blocks = weights.reshape(*lead, k // 4, 4, n // 16, 16)
    d = len(lead)
    return np.ascontiguousarray(blocks.transpose(*range(d), d + 2, d, d + 3, d + 1))


def signature(func) -> list[dict]:
    """Each parameter's name, shape and dtype (in TVM 0.27 a PrimFunc's params are the buffers)."""
    return [{"name": str(p.name), "shape": [int(s) for s in p.shape], "dtype": str(p.dtype)} for p in func.params]


class Worker:
    def __init__(self) -> None:
        self.func = None
        self.lib = None
        self.inputs: list = []

    # ------------------------------------------------------------ requests

    def tune(self, req: dict) -> dict:
        import tvm
        from tvm.s_tir import meta_schedule as ms

        func = te_func(req["name"], int(req["index"]), req["dtype"])
        sig = signature(func)  # the plain layouts, checked against ours
        if req.get("expect") is not None:
            want = [(s["shape"], s["dtype"]) for s in req["expect"]]
            got = [(s["shape"], s["dtype"]) for s in sig]
            if want != got:
                return {"ok": False, "error": f"TVM's {req['name']}:{req['index']} has parameters {got}, ours {want}"}
        packed = bool(req.get("pack_weights")) and vnni_packable(func)
        if packed:
            func = with_vnni_packed_weights(func)
        target = make_target(req["mcpu"], req["cores"])
        import tvm.s_tir.tensor_intrin  # TuneContext imports it anyway; ours then overrides dot_16x4_vnni

        register_vnni()
        builder = ms.builder.LocalBuilder(
            max_workers=int(req["cores"]),
            timeout_sec=float(req.get("build_timeout", 60)),
            f_build=build_without_intrin_import,
        )
        t0 = time.perf_counter()
        db = ms.tune_tir(
            func,
            target,
            req["work_dir"],
            max_trials_global=int(req["trials"]),
            num_trials_per_iter=64,
            num_tuning_cores=int(req["cores"]),
            builder=builder,
            seed=req.get("seed"),
        )
        wall = time.perf_counter() - t0
        sch = ms.tir_integration.compile_tir(db, func, target)
        if sch is None:
            return {"ok": False, "error": "TVM found no valid schedule", "wall_s": wall, "signature": sig}
        records = db.get_all_tuning_records()
        lat = [float(np.mean([float(x) for x in r.run_secs])) for r in records if r.run_secs]
        lat = [x for x in lat if x < 1e9]
        failed = len(records) - len(lat)
        sch, lib, finalists = self.fastest_finalist(db, func, target, int(req.get("finalists", 1)))
        self.func, self.lib = func, lib
        dump = req.get("dump_dir")
        if dump:
            os.makedirs(dump, exist_ok=True)
            with open(os.path.join(dump, "tvm_tir.py"), "w") as f:
                f.write(sch.mod.script())
            with open(os.path.join(dump, "tvm_trace.py"), "w") as f:
                f.write(str(sch.trace))
            for fmt, fname in (("ll", "tvm.ll"), ("asm", "tvm.s")):
                try:
                    text = lib.mod.inspect_source(fmt)
                except Exception as err:
                    text = f"; inspect_source({fmt!r}) failed: {err}\n"
                with open(os.path.join(dump, fname), "w") as f:
                    f.write(text)
            try:  # the built kernel itself, for re-timing later (tvm.runtime.load_module)
                lib.export_library(os.path.join(dump, "tvm_lib.so"))
            except Exception as err:
                print(f"export_library failed: {err}", file=sys.stderr)
        return {
            "ok": True,
            "wall_s": wall,
            "tuned_s": min(lat) if lat else None,
            "finalists_s": finalists,
            "records": len(records),
            "failed": failed,
            "signature": sig,
            "weights_packed": packed,
            "packed_signature": signature(func) if packed else None,
            "target": str(target),
            "tvm": tvm.__version__,
        }

    def fastest_finalist(self, db, func, target, k: int):
        """The schedule, built module and re-timed seconds of TVM's ``k`` best records: each is
        built and timed again (the fastest of 30 repeats of at least 2 ms) on random inputs, and
        the fastest kept, as our tuner re-times its finalists before choosing. With ``k`` 1 it is
        the record ``compile_tir`` picks, untimed."""
        import tvm
        from tvm.s_tir import Schedule
        from tvm.s_tir.meta_schedule.tir_integration import _normalize_mod

        mod = _normalize_mod(func)
        top = db.get_top_k(db.commit_workload(mod), max(k, 1))
        built = []
        for record in top:
            sch = Schedule(mod)
            record.trace.apply_to_schedule(sch, remove_postproc=False)
            built.append((sch, tvm.compile(sch.mod, target=target)))
        if len(built) == 1:
            return (*built[0], [])
        rng = np.random.default_rng(0)
        args = [
            tvm.runtime.tensor(rng.standard_normal(p["shape"]).astype(p["dtype"]) if "float" in p["dtype"]
                               else rng.integers(0, 8, p["shape"]).astype(p["dtype"]))
            for p in signature(func)
        ]  # fmt: skip
        seconds = []
        for _, lib in built:
            mod_lib = lib.mod if hasattr(lib, "mod") else lib
            f = mod_lib.time_evaluator("main", tvm.cpu(), number=1, repeat=30, min_repeat_ms=2)
            seconds.append(min(float(x) for x in f(*args).results))
        best = int(np.argmin(seconds))
        return (*built[best], seconds)

    def load(self, req: dict) -> dict:
        """A kernel exported by an earlier ``tune`` (``dump_dir/tvm_lib.so``), to run and time again."""
        import tvm

        self.lib = tvm.runtime.load_module(req["path"])
        return {"ok": True}

    def run(self, req: dict) -> dict:
        import tvm

        data = np.load(req["inputs"])
        arrays = [data[f"a{i}"] for i in range(len(data.files))]
        if req.get("pack_weights"):
            arrays[1] = pack_vnni(arrays[1])
        dev = tvm.cpu()
        self.inputs = [tvm.runtime.tensor(a, dev) for a in arrays]
        self.lib["main"](*self.inputs)
        np.savez(req["outputs"], *[t.numpy() for t in self.inputs])
        return {"ok": True}

    def time(self, req: dict) -> dict:
        import tvm

        lib = self.lib.mod if hasattr(self.lib, "mod") else self.lib  # compiled here, or loaded
        f = lib.time_evaluator(
            "main", tvm.cpu(), number=1, repeat=int(req.get("repeat", 3)), min_repeat_ms=round(req["min_repeat_ms"])
        )
        res = f(*self.inputs)
        return {"ok": True, "results": [float(x) for x in res.results]}


def serve() -> None:
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # TVM's prints go to stderr; replies only through `reply`
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req["cmd"] == "quit":
            break
        try:
            out = getattr(worker, req["cmd"])(req)
        except Exception as err:  # the driver reports it and goes on
            traceback.print_exc()
            out = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        reply.write(json.dumps(out) + "\n")


def check_vnni() -> int:
    """Tensorize a u8 x i8 GEMM with our intrinsic, compile it for znver4, look for vpdpbusd."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule.transform import tile_with_tensor_intrin

    register_vnni()
    n, m, k = 32, 64, 64
    a = te.placeholder((n, k), "uint8", "A")
    b = te.placeholder((m // 16, k // 4, 16, 4), "int8", "B")  # packed: 16 columns x 4 k per panel
    r = te.reduce_axis((0, k), "k")
    c = te.compute(
        (n, m),
        lambda i, j: te.sum(a[i, r].astype("int32") * b[j // 16, r // 4, j % 16, r % 4].astype("int32"), r),
        name="C",
    )
    sch = Schedule(te.create_prim_func([a, b, c]))
    block = sch.get_sblock("C")
    loop = tile_with_tensor_intrin(sch, block, VNNI_INTRIN)
    if loop is None:
        print("check-vnni: the VNNI intrinsic does not map onto the test GEMM")
        return 1
    sch.decompose_reduction(block, sch.get_loops(block)[0])
    sch.tensorize(loop, VNNI_INTRIN)
    lib = tvm.compile(sch.mod, target=make_target("znver4", 2))
    asm = lib.mod.inspect_source("asm")
    hits = sum("vpdpbusd" in line for line in asm.splitlines())
    print(f"check-vnni: {hits} vpdpbusd instruction(s) in the znver4 assembly of a tensorized {n}x{m}x{k} GEMM")
    return 0 if hits else 1


def main() -> int:
    if "--serve" in sys.argv:
        serve()
        return 0
    if "--check-vnni" in sys.argv:
        return check_vnni()
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""Analytic decisions for design-space traces: register tiles, cache-fit tiles, parallel extent.

The first round of the search has no measurements, so a random cost model ranks it; candidates
whose tile sizes follow the textbook rules of a CPU GEMM kernel make a far better start. Given a
design-space trace and the hardware, :func:`heuristic_traces` replays the trace and decides
every ``sample_perfect_tile`` of a block tiled by ``MultiLevelTiling`` (``SSRSRS``) and the
``sample_categorical`` of the parallel and unroll annotations::

    from tensorsearch.search.space.heuristics import heuristic_traces
    space = DesignSpace(workloads.get("GMM", 3, "int8").func, hardware.load("x86-znver4"))
    for trace in heuristic_traces(space.traces[0], space.func, space.hardware, variants=4):
        cand = space.replay(trace, 0)           # a valid program (None if a postprocessor refused)

The rules (per tiled block; ``S3`` innermost spatial tile, ``R1`` inner reduction tile):

* **register tile** (``S3``): the loop that walks the output's last dimension gets one or a few
  whole machine vectors of the narrowest operand it indexes there where its extent allows
  (``vector_bits`` from the YAML; an int8 GEMM on AVX2 loads 32 bytes of ``Y`` per vector; 208
  padded tokens get 16 float32 columns, not 52; for an intrinsic's outer block, whole intrinsic
  tiles), the other spatial loops (innermost first) rows, so that the accumulators fit the
  register file (32 vector registers for AVX-512 or aarch64, 16 otherwise, less one per loaded
  vector and two spare); the variants are the shapes of best loads-per-accumulator ratio first
  (each operand loaded once per tile iteration of the loops that index it);
* **streaming blocks** (the vector loop indexes every operand: a depthwise convolution, a
  pooling): no register tile saves loads, so variants 0 and 1 take one vector by up to 8 columns
  in registers, up to 8 rows as a job's steps, the reduction whole around them, and every other
  iteration as a parallel job; variants 2 on are the GEMM-like plan below;
* **L1 tile** (``R1``): reduction tiles grow (innermost loop first) while the operands touched
  under one register tile's ``R1`` loop fit half the L1 data cache (``caches.l1d``);
* **mid tile** (``S1``, above the reduction; ``S2`` is 1): spatial tiles grow (the smallest
  footprint first) while their input blocks fit half of L2 (``caches.l2``) and enough outer
  iterations stay for ``4 x cores`` jobs. Of loops that tie, the innermost grows, and to its
  whole extent where that fits, so that a job reads long runs of memory: a 1x1x1 convolution
  over 16x56x56x64 (C3D:1) took ``w`` by 2 and then ``d`` and ``h`` (2 KB runs of its input,
  14 KB apart) and ran 2.41 ms; with whole rows of ``w`` and ``h``, 1.88 ms. Under ``R0`` (at
  ``S2``) the reduction's init would zero the whole mid tile of outputs before any
  accumulation, and the outputs would pass through the caches twice: a 1x1 convolution (C2D:1,
  float32) ran 0.180 ms with its 8 x 2 steps at ``S2``, 0.139 with them at ``S1``; GRP:1 0.069
  and 0.042; GMM 1024^3 alike either way;
* **parallel** (``S0``): the outer spatial loops (outermost first) take the rest until they
  reach ``4 x cores`` iterations, the remainder joins ``S1``; the parallel annotation is the
  largest candidate not above that product;
* **unroll**: the smallest step that unrolls the register tile (one step per accumulator vector
  or intrinsic call), not the reduction loop around it; odd variants leave unrolling to LLVM;
* **compute locations**: inline (a padding stage read through its ``Select``), the root where
  inlining is illegal or an intrinsic reads the stage (a pack under the output's tile loops
  repeats whole for every tile); an untiled reduction at the deepest consumer loop where it
  computes each element once (a softmax's row sum under the row loop); with ``compute_root``
  the root for every stage.

Footprints are exact for affine accesses: a buffer region's extent along one dimension is
``sum |coefficient| x (tile - 1) + extent per iteration``. Any other sampling instruction (an
rfactor split) is sampled afresh with the schedule's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...ir import IntImm, PrimFunc, Var
from ...ir.functor import free_vars, substitute
from ...schedule import Schedule, ScheduleError, Trace
from ...schedule.trace import flatten_outputs, map_rvs
from ...target import Hardware
from .rule import PARALLEL, TILING_STRUCTURE, UNROLL, any_tensorized, is_reduction, iter_kinds

__all__ = ["MachineModel", "heuristic_traces"]

JOBS_PER_CORE = 4  # outer parallel iterations wanted per core (load balance)


@dataclass(frozen=True)
class MachineModel:
    """What the heuristics need of a hardware descriptor (sizes in bytes)."""

    vector_bytes: int
    vector_registers: int
    l1: int
    l2: int
    cores: int

    @classmethod
    def from_hardware(cls, hw: Hardware) -> MachineModel:
        """Read the vector width, caches and cores of ``hw``; the register count is 32 for
        AVX-512 and aarch64, else 16 (the YAML has no key for it)."""
        wide = hw.arch == "aarch64" or hw.has_feature("avx512f")
        return cls(
            vector_bytes=max(1, hw.vector_bits // 8),
            vector_registers=32 if wide else 16,
            l1=hw.caches.l1d,
            l2=hw.caches.l2,
            cores=max(1, hw.cores),
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _largest_divisor(n: int, limit: float) -> int:
    return max(d for d in _divisors(n) if d <= max(1, limit))


def _whole_vectors(n: int, limit: float, per_vector: float) -> int:
    """The largest divisor of ``n`` not above ``limit`` that is whole machine vectors (208 padded
    tokens, 16 lanes, at most 64: 16, not 52), else the largest divisor not above it."""
    whole = [d for d in _divisors(n) if d <= max(1, limit) and d % per_vector == 0]
    return max(whole) if whole else _largest_divisor(n, limit)


def _const(expr: Any) -> int | None:
    from ...arith import simplify

    e = simplify(expr)
    return e.value if isinstance(e, IntImm) else None


def _coefficients(expr: Any, variables: list[Var]) -> dict[Var, int]:
    """|d expr / d v| for each variable of ``expr`` (exact for affine expressions, else 1)."""
    used = [v for v in variables if v in free_vars(expr)]
    zero = {v: IntImm(v.dtype, 0) for v in used}
    base = _const(substitute(expr, zero))
    out = {}
    for v in used:
        one = _const(substitute(expr, {**zero, v: IntImm(v.dtype, 1)}))
        out[v] = abs(one - base) if one is not None and base is not None else 1
    return out


class _Block:
    """The facts of a tiled block its tile sizes are chosen from (loops bound one to one)."""

    def __init__(self, sch: Schedule, block: Any, model: MachineModel) -> None:
        realize, _ = sch._block_realize(block)
        blk = realize.block
        kinds = iter_kinds(sch, block)
        var_of_loop = {
            v: iv.var for iv, v in zip(blk.iter_vars, realize.iter_values, strict=True) if isinstance(v, Var)
        }
        self.model = model
        self.loops: list[tuple[Var, int, str]] = []  # (block iter var, extent, "S"/"R") in nest order
        for lp in sch.get_loops(block):
            node = sch.get(lp)
            ext = _const(node.extent)
            if node.loop_var in var_of_loop and ext is not None:
                self.loops.append((var_of_loop[node.loop_var], ext, kinds.get(node.loop_var, "S")))
        self.loop_vars = {sch.get(lp).loop_var: var_of_loop.get(sch.get(lp).loop_var) for lp in sch.get_loops(block)}
        variables = [iv.var for iv in blk.iter_vars]
        self.regions = []  # (element bytes, [(coefficients, extent per iteration)] per dimension, written)
        for region in list(blk.reads) + list(blk.writes):
            dims = [(_coefficients(r.min, variables), _const(r.extent) or 1) for r in region.region]
            self.regions.append((max(1, region.buffer.dtype.bits // 8), dims, region in blk.writes))
        write = blk.writes[0]
        self.acc_bytes = max(1, write.buffer.dtype.bits // 8) * math.prod(_const(r.extent) or 1 for r in write.region)
        self.vector_var = next(iter(_coefficients(write.region[-1].min, variables)), None)
        # bytes one iteration of the vector loop moves along the last dimension of the narrowest
        # operand it indexes there (int8 GEMM on AVX2: 1 byte of Y, so a vector is 32 iterations)
        steps = [
            elem * dims[-1][0][self.vector_var]
            for elem, dims, _ in self.regions
            if dims and self.vector_var in dims[-1][0]
        ]
        self.vector_step = max(1, min(steps)) if steps else self.acc_bytes

    def footprint(self, tiles: dict[Var, int], output: bool = True) -> int:
        """Bytes of the buffer regions the block touches over ``tiles`` iterations of its loops
        (without the output's when ``output`` is False)."""
        total = 0
        for elem, dims, written in self.regions:
            if written and not output:
                continue
            size = elem
            for coef, ext in dims:
                size *= ext + sum(c * (tiles.get(v, 1) - 1) for v, c in coef.items())
            total += size
        return total

    @property
    def operand_vars(self) -> list[set[Var]]:
        """The block vars that index each operand it reads (a zero coefficient does not count)."""
        return [
            {v for coef, _ in dims for v, c in coef.items() if c} for _, dims, written in self.regions if not written
        ]

    @property
    def per_vector(self) -> float:
        """Iterations of the vector loop one machine vector holds."""
        return max(1.0, self.model.vector_bytes / self.vector_step)

    def loads(self, tiles: dict[Var, int], vectors: float) -> float:
        """Loads per reduction step of a register tile: each operand is loaded once per tile
        iteration of the spatial loops that index it, in ``vectors`` along the vector loop (a
        GEMM: a broadcast of ``X`` per row plus the vectors of ``Y``; a depthwise convolution's
        input: one vector per accumulator, since no output channel shares it)."""
        total = 0.0
        for used in self.operand_vars:
            count = vectors if self.vector_var in used else 1.0
            for v, _, kind in self.loops:
                if kind == "S" and v != self.vector_var and v in used:
                    count *= tiles.get(v, 1)
            total += count
        return max(total, 1.0)

    def registers(self, tiles: dict[Var, int]) -> float:
        """Vector registers the accumulators of a register tile take."""
        spatial = math.prod(tiles.get(v, 1) for v, _, k in self.loops if k == "S")
        return spatial * self.acc_bytes / self.model.vector_bytes

    def register_tiles(self, max_inner: int) -> list[dict[Var, int]]:
        """Register-tile shapes (spatial var -> S3), best loads-per-accumulator ratio first."""
        spatial = [(v, e) for v, e, k in self.loops if k == "S" and e > 1]
        vec = next(((v, e) for v, e in spatial if v == self.vector_var), spatial[-1] if spatial else None)
        if vec is None:
            return [{}]
        rows = [(v, e) for v, e in reversed(spatial) if v != vec[0]]
        per_vector = self.per_vector
        shapes = []
        for n_vec in (1, 2, 3, 4, 6, 8):
            t_vec = _whole_vectors(vec[1], min(max_inner, n_vec * per_vector), per_vector)
            tiles = {vec[0]: t_vec}
            vectors = max(1.0, t_vec * self.vector_step / self.model.vector_bytes)
            budget = self.model.vector_registers - vectors - 2
            for v, e in rows:
                room = budget / max(self.registers(tiles), 1e-9)
                tiles[v] = _largest_divisor(e, min(max_inner, room))
            acc = self.registers(tiles)
            if acc > budget:
                continue
            shapes.append((-(acc / self.loads(tiles, vectors)), -acc, tiles))
        unique = []
        for *_, tiles in sorted(shapes, key=lambda s: (s[0], s[1])):
            if tiles not in unique:
                unique.append(tiles)
        return unique or [{}]

    @property
    def streams(self) -> bool:
        """Whether the vector loop indexes every operand (a depthwise convolution, a pooling): no
        operand is reused across the output's vectors, so a larger register tile saves no loads."""
        reads = self.operand_vars
        return bool(reads) and all(self.vector_var in used for used in reads)

    def stream_plan(self, structure: str, max_inner: int) -> tuple[dict[Var, int], dict[Var, list[int]]]:
        """The register tile and the tiles of a streaming block: one vector by up to 8 of the
        innermost other loop in registers (S3), up to 8 of the next as one job's steps (S1), the
        reduction whole around the register tile (R0), and every other iteration a parallel job
        (S0), the vector loop's outer part too (docs/search.md, "Depthwise tiles")."""
        rows = [(v, e) for v, e, k in reversed(self.loops) if k == "S" and v != self.vector_var and e > 1]
        register: dict[Var, int] = {}
        steps: dict[Var, int] = {}
        for v, e, k in self.loops:
            if k == "S" and v == self.vector_var:
                register[v] = _largest_divisor(e, min(max_inner, self.per_vector))
        if rows:  # the accumulators leave registers for the loads (int8: int32 accumulators)
            room = (self.model.vector_registers - 4) / max(self.registers(register), 1e-9)
            register[rows[0][0]] = _largest_divisor(rows[0][1], min(max_inner, 8, room))
        if len(rows) > 1:
            steps[rows[1][0]] = _largest_divisor(rows[1][1], 8)
        n_s, n_r = structure.count("S"), structure.count("R")
        out: dict[Var, list[int]] = {}
        self.parallel = 1
        for v, e, k in self.loops:
            if k == "S":
                inner, step = register.get(v, 1), steps.get(v, 1)
                out[v] = [e // (inner * step), step] + [1] * (n_s - 3) + [inner]
                self.parallel *= out[v][0]
            else:
                out[v] = [e] + [1] * (n_r - 1)
        return register, out

    def plan(self, structure: str, register: dict[Var, int], max_inner: int) -> dict[Var, list[int]]:
        """Per block var, its tiles outermost first (``structure.count(kind)`` of them)."""
        m = self.model
        inner = dict(register)
        # L1: reduction tiles, innermost loop first
        for v, e, k in reversed(self.loops):
            if k != "R":
                continue
            inner[v] = 1
            for d in _divisors(e):
                trial = {**inner, v: d}
                if d <= max_inner and self.footprint(trial) <= m.l1 // 2:
                    inner[v] = d
        # L2: spatial tiles above the register tile, the smallest footprint first; of equal
        # footprints the innermost loop, whole where it fits, so that a job reads long runs
        mid = {v: 1 for v, _, k in self.loops if k == "S"}
        jobs = m.cores * JOBS_PER_CORE

        def outer_iters(t: dict[Var, int]) -> int:
            return math.prod(e // (inner.get(v, 1) * t.get(v, 1)) for v, e, k in self.loops if k == "S")

        def grown(v: Var, factor: int) -> tuple[int, dict[Var, int]] | None:
            trial = {**mid, v: mid[v] * factor}
            tiles = {u: inner.get(u, 1) * trial.get(u, 1) for u, _, _ in self.loops}
            size = self.footprint(tiles, output=False)  # the output tile streams through
            return (size, trial) if size <= m.l2 // 2 and outer_iters(trial) >= jobs else None

        while True:
            options = []
            for depth, (v, e, k) in enumerate(self.loops):
                rest = e // (inner.get(v, 1) * mid[v]) if k == "S" else 1
                step = grown(v, min(p for p in _divisors(rest) if p > 1)) if rest > 1 else None
                if step is not None:
                    options.append((step[0], -depth, v, rest, step[1]))
            if not options:
                break
            size, _, v, rest, step = min(options, key=lambda o: o[:2])
            whole = grown(v, rest) if sum(o[0] == size for o in options) > 1 else None
            mid = whole[1] if whole is not None else step
        # parallel: outer spatial loops, outermost first, until 4 jobs per core
        outer, par = {}, 1
        for v, e, k in self.loops:
            if k != "S":
                continue
            rest = e // (inner.get(v, 1) * mid[v])
            outer[v] = 1 if par >= jobs else next((d for d in _divisors(rest) if par * d >= jobs), rest)
            par *= outer[v]
        self.parallel = par
        out = {}
        n_s, n_r = structure.count("S"), structure.count("R")
        for v, e, k in self.loops:
            if k == "S":
                out[v] = _spread([outer[v], mid[v], inner.get(v, 1)], e, n_s)
            else:
                out[v] = _spread([inner.get(v, 1)], e, n_r)
        return out


def _spread(inner_tiles: list[int], extent: int, n: int) -> list[int]:
    """``n`` tiles multiplying to ``extent``: given (outer, mid, register), ``[outer, the rest,
    1, ..., register]`` (the mid tile and the remainder at ``S1``, above the reduction); given
    just the innermost, ``[the rest, 1, ..., innermost]``."""
    if n == 1:
        return [extent]
    if len(inner_tiles) == 3 and n >= 4:
        outer, _mid, reg = inner_tiles
        return [outer, extent // (outer * reg)] + [1] * (n - 3) + [reg]
    reg = inner_tiles[-1]
    if len(inner_tiles) == 3 and n == 3:
        return [extent // (inner_tiles[1] * reg), inner_tiles[1], reg]
    return [extent // reg] + [1] * (n - 2) + [reg]


def _lookahead(trace: Trace) -> tuple[dict[int, str], dict[int, str], dict[int, int]]:
    """block RV id -> tiling structure; ExprRV id -> the annotation key it feeds; LoopRV id ->
    the id of the block whose get_loops made it."""
    structure, feeds, loop_block = {}, {}, {}
    for inst in trace.insts:
        args = inst.arg_dict
        name = inst.kind.name
        if name == "annotate" and args.get("ann_key") == TILING_STRUCTURE:
            structure[id(args["block_or_loop"])] = str(args["ann_val"])
        elif name == "annotate":
            feeds[id(args.get("ann_val"))] = args.get("ann_key")
        elif name == "get_loops":
            for rv in inst.outputs:
                loop_block[id(rv)] = id(args["block"])
    return structure, feeds, loop_block


class _Decider:
    """Decides the sampling instructions of one replay (one variant)."""

    def __init__(self, trace: Trace, model: MachineModel, variant: int, compute_root: bool = False) -> None:
        self.structure, self.feeds, self.loop_block = _lookahead(trace)
        self.compute_root = compute_root
        self.model = model
        self.variant = variant
        self.plans: dict[int, tuple[dict[Var, list[int]], dict[Var, Var | None]]] = {}
        self.parallel = model.cores * JOBS_PER_CORE
        self.unroll = 16  # steps of the register tile (one per accumulator vector or intrinsic call)

    def decide(self, sch: Schedule, inst: Any, kwargs: dict[str, Any], blocks: dict[int, Any]) -> Any:
        name = inst.kind.name
        if name == "sample_perfect_tile":
            return self._tile(sch, inst, kwargs, blocks)
        if name == "sample_compute_location":
            # compute_root: the root, where a stage runs once (a sampled loop may re-run it whole
            # at every iteration: compute_at cannot narrow a copy into a padded packed layout,
            # and a weight's pack under the output's spatial loops repeats for every tile).
            # Else inline (the root where inlining is illegal), as TVM's AutoInline does padding:
            # the consumer reads through the padding's Select, which costs no copy and no branch;
            # a pack an intrinsic reads cannot be inlined, and goes to the root
            if self.compute_root or _feeds_an_intrinsic(sch, kwargs["block"]):
                return -1
            if is_reduction(sch, kwargs["block"]):
                return _deepest_without_recompute(sch, kwargs["block"])
            return -2
        if name == "sample_categorical" and inst.outputs:
            key = self.feeds.get(id(inst.outputs[0]))
            cands = list(kwargs["candidates"])
            if key == PARALLEL:
                fit = [i for i, c in enumerate(cands) if c <= self.parallel]
                return max(fit, key=lambda i: cands[i]) if fit else 0
            if key == UNROLL:  # unroll the register tile (variant 1: leave unrolling to LLVM)
                if self.variant % 2:
                    return min(range(len(cands)), key=lambda i: cands[i])
                fit = [i for i, c in enumerate(cands) if c >= self.unroll]
                return min(fit, key=lambda i: cands[i]) if fit else max(range(len(cands)), key=lambda i: cands[i])
        return None

    def _tile(self, sch: Schedule, inst: Any, kwargs: dict[str, Any], blocks: dict[int, Any]) -> Any:
        block_id = self.loop_block.get(id(inst.arg_dict["loop"]))
        if block_id not in self.structure or block_id not in blocks:
            return None
        max_inner = int(kwargs.get("max_innermost_factor", 16))
        max_inner = 1 << 30 if max_inner == -1 else max_inner
        if block_id not in self.plans:
            info = _Block(sch, blocks[block_id], self.model)
            structure = self.structure[block_id]
            shape = self.variant // 2
            if info.streams and structure.count("S") >= 3 and shape == 0:
                register, plan = info.stream_plan(structure, max_inner)
            else:
                shapes = info.register_tiles(max_inner)
                register = shapes[(shape - info.streams) % len(shapes)]
                plan = info.plan(structure, register, max_inner)
            self.plans[block_id] = (plan, info.loop_vars)
            self.parallel = info.parallel
            self.unroll = max(1, round(info.registers(register)))
        plan, var_of = self.plans[block_id]
        tiles = plan.get(var_of.get(sch.get(kwargs["loop"]).loop_var))
        if tiles is None or len(tiles) != kwargs["n"] or tiles[-1] > max_inner:
            return None
        return list(tiles)


def _deepest_without_recompute(sch: Schedule, block: Any) -> int:
    """The deepest compute location of a reduction where it still computes each element once,
    else -1 (the root). A softmax's row sum goes under the row loop of its consumer, and LLVM
    vectorizes it there; under the column loop below, it would redo the row for every column."""
    extents = [_const(iv.dom.extent) for iv in sch.get(block).iter_vars]
    consumers = sch.get_consumers(block)
    if None in extents or not consumers:
        return -1
    for decision in reversed(range(len(sch.get_loops(consumers[0])))):
        fork = sch.copy()
        try:
            fork.compute_at(block, fork.sample_compute_location(block, decision=decision))
        except ScheduleError:
            continue
        if math.prod(_const(fork.get(lp).extent) or 0 for lp in fork.get_loops(block)) == math.prod(extents):
            return decision
    return -1


def _feeds_an_intrinsic(sch: Schedule, block: Any) -> bool:
    """Whether a consumer of ``block`` is (or will be) tensorized, so that a padding stage cannot
    be inlined into it (True when the consumers cannot be told)."""
    try:
        return any_tensorized(sch, sch.get_consumers(block))
    except ScheduleError:
        return True


def heuristic_trace(
    trace: Trace,
    func: PrimFunc,
    hardware: Hardware,
    variant: int = 0,
    seed: int = 0,
    compute_root: bool = False,
) -> Trace | None:
    """``trace`` (a design-space trace of ``func``) with analytic decisions of ``variant``
    (0: the best register tile, unrolled; 1: the same, unrolling left to LLVM; 2, 3: the next
    shape...; with ``compute_root`` every sampled compute location is the root), or None when a
    primitive refuses them. Decisions the heuristics do not cover are sampled with ``seed``."""
    decider = _Decider(trace, MachineModel.from_hardware(hardware), variant, compute_root)
    sch = Schedule(func, seed=seed, check=False, error_detail="none", hardware=hardware)
    mapping: dict[int, Any] = {}
    blocks: dict[int, Any] = {}
    try:
        for inst in trace.insts:
            if inst.kind.name == "enter_postproc":
                break
            kwargs = {k: map_rvs(v, lambda rv: mapping[id(rv)]) for k, v in inst.args}
            if inst.kind.sampling:
                kwargs["decision"] = decider.decide(sch, inst, kwargs, blocks)
            outputs = flatten_outputs(getattr(sch, inst.kind.name)(**kwargs))
            for old, new in zip(inst.outputs, outputs, strict=True):
                mapping[id(old)] = new
                if type(new).__name__ == "BlockRV":
                    blocks[id(old)] = new
    except ScheduleError:
        return None
    except Exception:  # analytic candidates are optional: a block they misread gives none
        return None
    return sch.trace.simplified()


def heuristic_traces(
    trace: Trace,
    func: PrimFunc,
    hardware: Hardware,
    variants: int = 4,
    seed: int = 0,
    compute_root: bool = False,
) -> list[Trace]:
    """Up to ``variants`` distinct analytic decision sets of ``trace`` (see :func:`heuristic_trace`)."""
    out: list[Trace] = []
    seen: set[str] = set()
    for variant in range(variants * 2):
        if len(out) >= variants:
            break
        t = heuristic_trace(trace, func, hardware, variant, seed, compute_root)
        if t is not None and t.as_json_text() not in seen:
            seen.add(t.as_json_text())
            out.append(t)
    return out

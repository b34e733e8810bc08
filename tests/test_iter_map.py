"""Quasi-affine iterator maps: detect_iter_map, affine_binding_error, subspace_divide."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsearch.arith import (
    affine_binding_error,
    detect_iter_map,
    normalize_iter_map_to_expr,
    simplify,
    subspace_divide,
)
from tensorsearch.ir import BlockRealize, Range, Var
from tensorsearch.ir.functor import substitute
from tensorsearch.schedule.tree import find_block, loops_above
from tensorsearch.script import parse

i, j, k = Var("i"), Var("j"), Var("k")
io, ii = Var("io"), Var("ii")


def R(n: int) -> Range:
    return Range.from_extent(n)


def texts(res) -> list[str]:
    return [str(normalize_iter_map_to_expr(s)) for s in res.indices]


# -- legal and illegal maps -------------------------------------------------------------


def test_split_is_bijective():
    res = detect_iter_map([i // 4, i % 4], {i: R(16)})
    assert res.errors == []
    assert texts(res) == ["i // 4", "i % 4"]
    (s1,), (s2,) = res.indices[0].args, res.indices[1].args
    assert s1.source is s2.source  # both split the same mark
    assert (s1.lower_factor, s1.extent, s1.scale) == (4, 4, 1)
    assert (s2.lower_factor, s2.extent, s2.scale) == (1, 4, 1)


def test_iterator_used_twice():
    res = detect_iter_map([i, 2 * i], {i: R(16)})
    assert len(res.errors) == 1
    assert "iterator i is used twice" in res.errors[0]
    assert not res


def test_fused_is_bijective():
    res = detect_iter_map([i * 4 + j], {i: R(4), j: R(4)})
    assert res.errors == []
    (s,) = res.indices[0].args
    assert s.extent == 16 and s.scale == 1
    assert texts(res) == ["i * 4 + j"]


def test_overlapping_sum_is_rejected():
    res = detect_iter_map([i + j], {i: R(4), j: R(4)})
    assert "i + j is not a fusion of iterators" in res.errors[0]
    assert "same stride 1" in res.errors[0]


def test_gap_between_terms_is_rejected():
    res = detect_iter_map([i * 8 + j], {i: R(4), j: R(4)}, check_level="surjective")
    assert "not a fusion of iterators" in res.errors[0]


def test_split_of_a_fusion():
    # what split(fuse(i, j), 4) gives: (i*8 + j) // 4 and (i*8 + j) % 4
    dom = {i: R(4), j: R(8)}
    res = detect_iter_map([(i * 8 + j) // 4, (i * 8 + j) % 4], dom)
    assert res.errors == []
    assert texts(res) == ["i * 2 + j // 4", "j % 4"]
    # only the high part: onto, but not one-to-one
    res = detect_iter_map([(i * 8 + j) // 4], dom)
    assert "only part of iterator j" in res.errors[0]
    assert detect_iter_map([(i * 8 + j) // 4], dom, check_level="surjective").errors == []


def test_unused_iterator():
    res = detect_iter_map([i], {i: R(16), j: R(4)})
    assert res.errors == ["iterator j (extent 4) is not used by any index; a bijective map uses every iterator"]
    assert detect_iter_map([i], {i: R(16), j: R(4)}, check_level="surjective").errors == []
    # an iterator of extent 1 need not be used
    assert detect_iter_map([i], {i: R(16), j: R(1)}).errors == []


def test_non_affine_expressions():
    assert "multiplies two iterator expressions" in detect_iter_map([i * j], {i: R(4), j: R(4)}).errors[0]
    assert "not a positive constant" in detect_iter_map([i // j], {i: R(4), j: R(4)}).errors[0]
    n = Var("n")
    assert "non-constant" in detect_iter_map([i * n], {i: R(4)}).errors[0]
    assert "negative" in detect_iter_map([15 - i], {i: R(16)}).errors[0]


def test_recombined_digits_are_the_iterator():
    res = detect_iter_map([(i // 4) * 4 + i % 4], {i: R(16)})
    assert res.errors == [] and texts(res) == ["i"]


def test_three_level_split():
    dom = {i: R(64)}
    assert detect_iter_map([i // 16, i // 4 % 4, i % 4], dom).errors == []
    assert "overlap" in detect_iter_map([i // 16, i // 2 % 8, i % 4], dom).errors[0]


def test_constant_offset_and_nonzero_min():
    res = detect_iter_map([i + 3], {i: R(8)})
    assert res.errors == [] and res.indices[0].base.value == 3
    res = detect_iter_map([i], {i: Range(2, 6)})
    assert res.errors == [] and res.indices[0].extent == 6


def test_padded_split_needs_the_predicate():
    dom = {io: R(3), ii: R(4)}
    res = detect_iter_map([io * 4 + ii], dom, io * 4 + ii < 10, check_level="surjective")
    assert res.errors == []
    assert res.indices[0].extent == 10
    assert str(res.padding_predicate) == "io * 4 + ii < 10"
    # a predicate that no index uses as a whole
    res = detect_iter_map([io, ii], dom, io * 4 + ii < 10, check_level="surjective")
    assert "which no index uses as a whole" in res.errors[0]


def test_single_iterator_predicate_narrows_it():
    res = detect_iter_map([i], {i: R(16)}, i < 10)
    assert res.errors == [] and res.indices[0].extent == 10


# -- bindings of blocks -----------------------------------------------------------------

TILED = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i0, i1 in T.grid(4, 16):
        with T.block("B"):
            vi = T.axis.spatial(64, BINDING)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
"""


def _realize(binding: str) -> tuple[BlockRealize, dict]:
    func = parse(TILED.replace("BINDING", binding))
    loc = find_block(func, "B")
    loops = {f.loop_var: Range(f.min, f.extent) for f in loops_above(loc.path[:-1])}
    return loc.parent, loops


def test_affine_binding_error():
    realize, loops = _realize("i0 * 16 + i1")
    assert affine_binding_error(realize, loops) is None
    realize, loops = _realize("i1 * 4 + i0")
    assert affine_binding_error(realize, loops) is None
    realize, loops = _realize("i0 + i1")
    assert "the bindings of block B are not an affine map of the loops" in affine_binding_error(realize, loops)
    realize, loops = _realize("i1")
    assert affine_binding_error(realize, loops) == "block B binds iterator vi of extent 64 to i1, which takes 16 values"
    realize, loops = _realize("i1 * 2")
    assert "stride 2" in affine_binding_error(realize, loops)


def test_affine_answers_are_remembered(monkeypatch):
    from tensorsearch.arith import iter_map

    computed = []
    work = iter_map.uncached_affine_binding_error
    monkeypatch.setattr(iter_map, "uncached_affine_binding_error", lambda r, d: computed.append(r) or work(r, d))
    realize, loops = _realize("i0 * 16 + i1")
    assert affine_binding_error(realize, loops) is None and len(computed) == 1
    # affinity does not depend on the order of the loops: the answer is found, not worked out
    assert affine_binding_error(realize, dict(reversed(list(loops.items())))) is None and len(computed) == 1
    # a reason is remembered for the same loops in the same order only
    bad, bad_loops = _realize("i0 + i1")
    first = affine_binding_error(bad, bad_loops)
    assert affine_binding_error(bad, bad_loops) == first and len(computed) == 2
    affine_binding_error(bad, dict(reversed(list(bad_loops.items()))))
    assert len(computed) == 3
    # a realize rebuilt around the same bindings (a renamed block, say) finds the answer
    from dataclasses import replace

    renamed = replace(realize, block=replace(realize.block, name="B_update"))
    assert affine_binding_error(renamed, loops) is None and len(computed) == 3


# -- subspace division -------------------------------------------------------------------


def test_subspace_divide_tiles():
    dom = {io: R(4), ii: R(16), k: R(8)}
    d = subspace_divide([io * 16 + ii, k], dom, {ii})
    assert d.error is None
    assert [(str(o), oe, str(x), xe) for o, oe, x, xe in d.parts] == [("io", 4, "ii", 16), ("k", 8, "0", 1)]


def test_subspace_divide_split_of_fusion():
    d = subspace_divide([(i * 8 + j) // 4, (i * 8 + j) % 4], {i: R(4), j: R(8)}, {j})
    assert [(str(o), oe, str(x), xe) for o, oe, x, xe in d.parts] == [("i", 4, "j // 4", 2), ("0", 1, "j % 4", 4)]


def test_subspace_divide_refuses_inner_above_outer():
    d = subspace_divide([j * 4 + i], {i: R(4), j: R(8)}, {j})
    assert d.parts is None and d.index == 0
    assert "mixes inner and outer loops" in d.error


def test_subspace_divide_predicates():
    dom = {io: R(3), ii: R(4), k: R(4)}
    d = subspace_divide([io * 4 + ii, k], dom, {k}, io * 4 + ii < 10)
    assert d.error is None and str(d.outer_predicate) == "io * 4 + ii < 10" and d.inner_predicate.value == 1
    d = subspace_divide([io * 4 + ii], dom, {ii}, io * 4 + ii < 10)
    assert d.parts is None and "not a multiple" in d.error


def test_subspace_divide_reconstructs_binding():
    dom = {i: R(2), j: R(4), k: R(8)}
    bindings = [(i * 4 + j) // 2, (i * 4 + j) % 2, k]
    d = subspace_divide(bindings, dom, {j, k})
    assert d.error is None
    for b, (o, _, x, xe) in zip(bindings, d.parts, strict=True):
        for vals in itertools.product(range(2), range(4), range(8)):
            env = dict(zip((i, j, k), vals, strict=True))
            got = simplify(substitute(o * xe + x, {v: _c(n) for v, n in env.items()}))
            want = simplify(substitute(b, {v: _c(n) for v, n in env.items()}))
            assert got.value == want.value


def _c(n: int):
    from tensorsearch.ir import const

    return const(n)


# -- property: accepted bijective maps are bijections -----------------------------------


def _random_map(seed: int) -> tuple[list, dict]:
    rng = random.Random(seed)
    nvars = rng.randint(1, 3)
    vs = [Var(f"x{n}") for n in range(nvars)]
    dom = {v: R(rng.choice([1, 2, 3, 4, 6, 8])) for v in vs}

    def expr(depth: int):
        r = rng.random()
        if depth == 0 or r < 0.3:
            return rng.choice(vs)
        if r < 0.55:
            a, b = expr(depth - 1), expr(depth - 1)
            return a * rng.choice([1, 2, 3, 4, 6, 8]) + b
        if r < 0.7:
            return expr(depth - 1) // rng.choice([2, 3, 4])
        if r < 0.85:
            return expr(depth - 1) % rng.choice([2, 3, 4])
        return expr(depth - 1) + expr(depth - 1)

    n_idx = rng.randint(1, 3)
    return [expr(2) for _ in range(n_idx)], dom


def _evaluate(indices, dom):
    vs = list(dom)
    points = []
    for vals in itertools.product(*[range(int(dom[v].extent.value)) for v in vs]):
        m = {v: _c(x) for v, x in zip(vs, vals, strict=True)}
        points.append(tuple(simplify(substitute(e, m)).value for e in indices))
    return points


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_accepted_maps_are_bijections(seed):
    indices, dom = _random_map(seed)
    res = detect_iter_map(indices, dom)
    if res.errors:
        return
    points = _evaluate(indices, dom)
    assert len(set(points)) == len(points), "an accepted map is not one-to-one"
    # the image is the box of the index extents (each index takes its extent's values)
    assert len(points) == max(1, _prod(s.extent for s in res.indices))
    for n, s in enumerate(res.indices):
        assert len({p[n] for p in points}) == s.extent


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def test_property_is_not_vacuous():
    accepted = sum(1 for seed in range(300) if not detect_iter_map(*_random_map(seed)).errors)
    rejected = 300 - accepted
    assert accepted > 30 and rejected > 30


def test_surjective_maps_hit_every_value():
    for seed in range(300):
        indices, dom = _random_map(seed)
        res = detect_iter_map(indices, dom, check_level="surjective")
        if res.errors:
            continue
        points = set(_evaluate(indices, dom))
        assert len(points) == max(1, _prod(s.extent for s in res.indices)), (seed, [str(e) for e in indices])


def test_the_quick_tiling_test_agrees_with_the_full_detection(monkeypatch):
    # bindings a split and reorder could leave (mixed-radix sums of loop variables), and near
    # misses (an offset, a span short of the iterator, a loop used twice): whenever the quick
    # test accepts, the full detection does too, and it accepts the true tilings
    from tensorsearch.arith import iter_map
    from tensorsearch.ir import TRUE, Block, BlockRealize, Evaluate, IterType, IterVar, const

    rng = random.Random(11)
    cases = []
    for _ in range(300):
        loops, values, iters, flawed = {}, [], [], False
        for k in range(rng.randint(1, 3)):
            factors = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randint(1, 3))]
            vs = [Var(f"l{k}_{m}") for m in range(len(factors))]
            loops.update({v: R(f) for v, f in zip(vs, factors, strict=True)})
            value, scale = None, 1
            for v, f in reversed(list(zip(vs, factors, strict=True))):
                value = v * scale if value is None else v * scale + value
                scale *= f
            flaw = rng.random()
            if flaw < 0.15:
                value, flawed = value + 1, True  # an offset
            elif flaw < 0.3:
                scale, flawed = scale + 1, True  # a span short of the iterator
            elif flaw < 0.4 and len(vs) > 1:
                value, flawed = value + vs[0], True  # a loop used twice
            values.append(value)
            iters.append(IterVar(Var(f"v{k}"), R(scale), IterType.SPATIAL))
        order = list(loops.items())
        rng.shuffle(order)
        block = Block("B", tuple(iters), (), (), Evaluate(const(0)))
        cases.append((BlockRealize(tuple(values), TRUE, block), dict(order), flawed))
    quick = [iter_map._tiled_bindings(r, d) for r, d, _ in cases]
    monkeypatch.setattr(iter_map, "_tiled_bindings", lambda r, d: False)
    for (realize, loops, flawed), fast in zip(cases, quick, strict=True):
        if fast:
            assert iter_map.uncached_affine_binding_error(realize, loops) is None, realize.iter_values
        assert fast or flawed, realize.iter_values  # every true tiling is accepted quickly
    assert sum(quick) > 100

"""The block signatures of GMM, C2D and DEP are what the paper's definitions give.

Each expected program is written by hand in the project's script syntax from the operator's
definition (paper section 3.1 and TVM's te_workload table) and compared structurally with
what ``tensorsearch.workloads`` builds through the compute DSL.
"""

from tensorsearch import workloads
from tensorsearch.ir import IterType, assert_structural_equal, post_order_visit
from tensorsearch.ir.stmt import Block
from tensorsearch.script import parse

GMM_INT8 = """
@T.prim_func
def main(X: T.Buffer((1, 512, 512), "uint8"), Y: T.Buffer((1, 512, 32), "int8"), Z: T.Buffer((1, 512, 32), "int32")):
    for b, i, j, k in T.grid(1, 512, 32, 512):
        with T.block("Z"):
            vb = T.axis.spatial(1, b)
            vi = T.axis.spatial(512, i)
            vj = T.axis.spatial(32, j)
            vk = T.axis.reduce(512, k)
            T.reads(X[vb, vi, vk], Y[vb, vk, vj])
            T.writes(Z[vb, vi, vj])
            with T.init():
                Z[vb, vi, vj] = 0
            Z[vb, vi, vj] = Z[vb, vi, vj] + T.Cast("int32", X[vb, vi, vk]) * T.Cast("int32", Y[vb, vk, vj])
"""

# conv2d_nhwc with stride 2 and padding 3: a padding stage, then a reduction over rh, rw, rc
C2D_0 = """
@T.prim_func
def main(inputs: T.Buffer((1, 224, 224, 3), "float32"), weight: T.Buffer((7, 7, 3, 64), "float32"),
         conv2d_nhwc: T.Buffer((1, 112, 112, 64), "float32")):
    PadInput = T.alloc_buffer((1, 230, 230, 3), "float32")
    for n, h, w, c in T.grid(1, 230, 230, 3):
        with T.block("PadInput"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            T.reads(inputs[vn, vh - 3, vw - 3, vc])
            T.writes(PadInput[vn, vh, vw, vc])
            PadInput[vn, vh, vw, vc] = T.Select(vh >= 3 and vh < 227 and vw >= 3 and vw < 227,
                                                inputs[vn, vh - 3, vw - 3, vc], T.float32(0.0))
    for n, h, w, co, rh, rw, rc in T.grid(1, 112, 112, 64, 7, 7, 3):
        with T.block("conv2d_nhwc"):
            vn, vh, vw, vco, vrh, vrw, vrc = T.axis.remap("SSSSRRR", [n, h, w, co, rh, rw, rc])
            T.reads(PadInput[vn, vh * 2 + vrh, vw * 2 + vrw, vrc], weight[vrh, vrw, vrc, vco])
            T.writes(conv2d_nhwc[vn, vh, vw, vco])
            with T.init():
                conv2d_nhwc[vn, vh, vw, vco] = T.float32(0.0)
            conv2d_nhwc[vn, vh, vw, vco] = conv2d_nhwc[vn, vh, vw, vco] + PadInput[vn, vh * 2 + vrh, vw * 2 + vrw, vrc] * weight[vrh, vrw, vrc, vco]
"""

# depthwise: the channel is a spatial iterator shared by input, weight and output; only rh, rw reduce
DEP_2 = """
@T.prim_func
def main(inputs: T.Buffer((1, 14, 14, 512), "float32"), weight: T.Buffer((1, 3, 3, 512), "float32"),
         depth_conv2d_nhwc: T.Buffer((1, 7, 7, 512), "float32")):
    PadInput = T.alloc_buffer((1, 16, 16, 512), "float32")
    for n, h, w, c in T.grid(1, 16, 16, 512):
        with T.block("PadInput"):
            vn, vh, vw, vc = T.axis.remap("SSSS", [n, h, w, c])
            T.reads(inputs[vn, vh - 1, vw - 1, vc])
            T.writes(PadInput[vn, vh, vw, vc])
            PadInput[vn, vh, vw, vc] = T.Select(vh >= 1 and vh < 15 and vw >= 1 and vw < 15,
                                                inputs[vn, vh - 1, vw - 1, vc], T.float32(0.0))
    for n, h, w, c, rh, rw in T.grid(1, 7, 7, 512, 3, 3):
        with T.block("depth_conv2d_nhwc"):
            vn, vh, vw, vc, vrh, vrw = T.axis.remap("SSSSRR", [n, h, w, c, rh, rw])
            T.reads(PadInput[vn, vh * 2 + vrh, vw * 2 + vrw, vc], weight[0, vrh, vrw, vc])
            T.writes(depth_conv2d_nhwc[vn, vh, vw, vc])
            with T.init():
                depth_conv2d_nhwc[vn, vh, vw, vc] = T.float32(0.0)
            depth_conv2d_nhwc[vn, vh, vw, vc] = depth_conv2d_nhwc[vn, vh, vw, vc] + PadInput[vn, vh * 2 + vrh, vw * 2 + vrw, vc] * weight[0, vrh, vrw, vc]
"""


def test_gmm_int8_signature():
    assert_structural_equal(workloads.get("GMM", 1, "int8").func, parse(GMM_INT8))


def test_c2d_signature():
    assert_structural_equal(workloads.get("C2D", 0, "float32").func, parse(C2D_0))


def test_dep_signature():
    assert_structural_equal(workloads.get("DEP", 2, "float32").func, parse(DEP_2))


def _blocks(func):
    found = {}
    post_order_visit(func.body, lambda n: found.__setitem__(n.name, n) if isinstance(n, Block) else None)
    return found


def test_iterator_kinds_follow_the_definitions():
    """Spatial for every output index, reduce for every summed index, across all shapes."""
    expected = {"GMM": "SSSR", "C2D": "SSSSRRR", "DEP": "SSSSRR"}
    output_block = {"GMM": "Z", "C2D": "conv2d_nhwc", "DEP": "depth_conv2d_nhwc"}
    for name, kinds in expected.items():
        for index in range(4):
            block = _blocks(workloads.get(name, index).func)[output_block[name]]
            got = "".join("S" if iv.iter_type == IterType.SPATIAL else "R" for iv in block.iter_vars)
            assert got == kinds, (name, index)

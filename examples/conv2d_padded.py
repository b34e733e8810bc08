"""A program of your own for `tensorsearch tune|match|show`: a padding stage and a 3x3 convolution
(NHWC, HWIO), written with the te compute DSL. Any module-level PrimFunc is found; `--func NAME`
picks one when a file defines several.

    tensorsearch show examples/conv2d_padded.py
    tensorsearch tune examples/conv2d_padded.py --hardware host --trials 64
"""

from tensorsearch import te

N, H, W, CI, CO, K = 1, 16, 16, 32, 32, 3

data = te.placeholder((N, H, W, CI), "float32", name="data")
weight = te.placeholder((K, K, CI, CO), "float32", name="weight")
padded = te.compute(
    (N, H + 2, W + 2, CI),
    lambda n, h, w, c: te.if_then_else(
        te.all(h >= 1, h <= H, w >= 1, w <= W), data[n, h - 1, w - 1, c], te.const(0.0, "float32")
    ),
    name="padded",
)
rh = te.reduce_axis((0, K), name="rh")
rw = te.reduce_axis((0, K), name="rw")
rc = te.reduce_axis((0, CI), name="rc")
conv = te.compute(
    (N, H, W, CO),
    lambda n, h, w, co: te.sum(padded[n, h + rh, w + rw, rc] * weight[rh, rw, rc, co], axis=[rh, rw, rc]),
    name="conv",
)
func = te.create_prim_func([data, weight, conv])

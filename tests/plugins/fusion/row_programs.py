"""Row-wise transformer programs in hand-written Tensor IR, with what PyTorch computes.

They do not depend on how the frontend decomposes an op, so that their fused Loop IR
can be compared with golden printouts and fed to the schedules directly.
"""

from __future__ import annotations

import torch

from lamina.core.ir import expr as ex
from tests.core.stages import tensor_programs as tp

EPS = 1e-6


def _widen(b: tp.TensorProgramBuilder, row_value: str, rows: int, width: int) -> str:
    return b.index_map(row_value, (rows, width), lambda d: (d[0], 0))


def rms_norm(rows: int, width: int, residual: bool = False) -> tp.Case:
    """``x * rsqrt(mean(x * x, -1, keepdim) + eps) * w``; with ``residual``, x is ``x + r``
    and is returned too (the residual stream read again later)."""
    b = tp.TensorProgramBuilder()
    x = b.input("x", rows, width)
    r = b.input("r", rows, width) if residual else None
    w = b.input("w", width)
    h = b.elementwise("h", tp.add, x, r) if residual else x
    square = b.elementwise("square", lambda a: tp.mul(a, a), h)
    total = b.reduce(square, (1,), "sum", keepdim=True)
    scale = b.elementwise("scale", lambda s: ex.op("rsqrt", tp.add(tp.mul(s, 1.0 / width), EPS)), total)
    weight = b.index_map(w, (rows, width), lambda d: (d[1],))
    normed = b.elementwise("normed", tp.mul, h, _widen(b, scale, rows, width))
    out = b.elementwise("out", tp.mul, normed, weight)

    def norm(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w

    if residual:
        return tp.Case("add_rms_norm", b.program(h, out), lambda x, r, w: (x + r, norm(x + r, w)))
    return tp.Case("rms_norm", b.program(out), lambda x, w: (norm(x, w),))


def softmax(rows: int, width: int) -> tp.Case:
    """Softmax over the last axis with the row max subtracted, as the decompositions write it."""
    b = tp.TensorProgramBuilder()
    x = b.input("x", rows, width)
    peak = b.reduce(x, (1,), "max", keepdim=True)
    shifted = b.elementwise(
        "shifted", lambda a, m: ex.op("exp", ex.op("sub", a, m)), x, _widen(b, peak, rows, width)
    )
    total = b.reduce(shifted, (1,), "sum", keepdim=True)
    out = b.elementwise("out", lambda e, s: ex.op("div", e, s), shifted, _widen(b, total, rows, width))
    return tp.Case("softmax", b.program(out), lambda x: (torch.softmax(x, -1),))


def layer_norm(rows: int, width: int) -> tp.Case:
    """``(x - mean) * rsqrt(var + eps)``: the variance reads the mean inside its reduction."""
    b = tp.TensorProgramBuilder()
    x = b.input("x", rows, width)
    mean = b.elementwise("mean", lambda s: tp.mul(s, 1.0 / width), b.reduce(x, (1,), "sum", keepdim=True))
    centred = b.elementwise("centred", lambda a, m: ex.op("sub", a, m), x, _widen(b, mean, rows, width))
    square = b.elementwise("square", lambda a: tp.mul(a, a), centred)
    var = b.elementwise("var", lambda s: tp.mul(s, 1.0 / width), b.reduce(square, (1,), "sum", keepdim=True))
    scale = b.elementwise("scale", lambda v: ex.op("rsqrt", tp.add(v, EPS)), var)
    out = b.elementwise("out", tp.mul, centred, _widen(b, scale, rows, width))
    return tp.Case(
        "layer_norm", b.program(out), lambda x: (torch.nn.functional.layer_norm(x, (width,), eps=EPS),)
    )

"""Kernel IR kernels for tensor-core multiply-adds and tf32 rounding, with their operands."""

from __future__ import annotations

import torch

from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, cast, const, op

F32 = dtypes.float32
TX = kir.thread_idx("x")
WARPS = 2


def one_mma_per_warp(guard=None, acc_space: str = "register", a_values: int = 4) -> kir.Kernel:
    """Warp ``w`` computes ``d[w] = a[w] @ b[w] + c[w]`` (16 x 8 x 8), each lane reading and
    writing its pieces as PTX lays them out for m16n8k8."""
    warp, lane = TX // 32, TX % 32
    g, t = Var("g"), Var("t")

    def a_at(i):
        return kir.Load("a", (warp * 128 + (g + 8 * (i % 2)) * 8 + t + 4 * (i // 2),), F32)

    def b_at(i):
        return kir.Load("b", (warp * 64 + (t + 4 * i) * 8 + g,), F32)

    def c_place(i):
        return warp * 128 + (g + 8 * (i // 2)) * 8 + 2 * t + i % 2

    mma = kir.MmaTf32("acc", [(const(i),) for i in range(4)], [a_at(i) for i in range(a_values)],
                      [b_at(i) for i in range(2)])
    return kir.Kernel(
        name="mma",
        params=[kir.Param("a", F32, WARPS * 128), kir.Param("b", F32, WARPS * 64), kir.Param("c", F32, WARPS * 128),
                kir.Param("d", F32, WARPS * 128, writable=True)],
        arrays=[kir.Array("acc", F32, (4,), acc_space)],
        body=[
            kir.Declare("g", dtypes.index, lane // 4),
            kir.Declare("t", dtypes.index, lane % 4),
            *[kir.Store("acc", (const(i),), kir.Load("c", (c_place(i),), F32)) for i in range(4)],
            mma if guard is None else kir.If(guard, [mma]),
            *[kir.Store("d", (c_place(i),), kir.Load("acc", (const(i),), F32)) for i in range(4)],
        ],
        launch=kir.Launch((1, 1, 1), (32 * WARPS, 1, 1)),
    )


def operands():
    """Random A, B and C of every warp."""
    return torch.randn(WARPS, 16, 8), torch.randn(WARPS, 8, 8), torch.randn(WARPS, 16, 8)


def tf32_rounding(n: int) -> kir.Kernel:
    """``y = tf32(x)`` for ``n`` (at most 32) elements."""
    return kir.Kernel(
        name="tf32_round", params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True)], arrays=[],
        body=[kir.If(op("lt", TX, n), [kir.Store("y", (TX,), kir.Tf32(kir.Load("x", (TX,), F32)))])],
        launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )


ROUNDING_CASES = [1.0, 1 + 2.0 ** -11, 1 + 2.0 ** -12, 1 + 3 * 2.0 ** -12, -(1 + 2.0 ** -11), 3.0e38, 1e-40,
                  float("inf"), -float("inf"), float("nan")]
"""Values whose tf32 rounding is worth checking: ties, near ties, the largest finite, a
subnormal, infinities and a NaN."""


def one_sixteen_bit_mma_per_warp(dtype=dtypes.bfloat16, guard=None) -> kir.Kernel:
    """Warp ``w`` computes ``d[w] = a[w] @ b[w] + c[w]`` (16 x 8 x 16, ``a`` and ``b`` of ``dtype``),
    each lane packing its pairs of A and B as PTX lays them out for m16n8k16."""
    warp, lane = TX // 32, TX % 32
    g, t = Var("g"), Var("t")

    def value(array, at):
        return cast(kir.Load(array, (at,), dtype), F32)

    def a_word(i):  # row g + 8 (i % 2), columns 2t + 8 (i // 2) and the next
        at = warp * 256 + (g + 8 * (i % 2)) * 16 + 2 * t + 8 * (i // 2)
        return kir.PackedPair(value("a", at), value("a", at + 1), dtype)

    def b_word(i):  # rows 2t + 8 i and the next, column g
        at = warp * 128 + (2 * t + 8 * i) * 8 + g
        return kir.PackedPair(value("b", at), value("b", at + 8), dtype)

    def c_place(i):
        return warp * 128 + (g + 8 * (i // 2)) * 8 + 2 * t + i % 2

    mma = kir.Mma16("acc", [(const(i),) for i in range(4)], [a_word(i) for i in range(4)],
                    [b_word(i) for i in range(2)], dtype)
    return kir.Kernel(
        name="mma16",
        params=[kir.Param("a", dtype, WARPS * 256), kir.Param("b", dtype, WARPS * 128),
                kir.Param("c", F32, WARPS * 128), kir.Param("d", F32, WARPS * 128, writable=True)],
        arrays=[kir.Array("acc", F32, (4,), "register")],
        body=[
            kir.Declare("g", dtypes.index, lane // 4),
            kir.Declare("t", dtypes.index, lane % 4),
            *[kir.Store("acc", (const(i),), kir.Load("c", (c_place(i),), F32)) for i in range(4)],
            mma if guard is None else kir.If(guard, [mma]),
            *[kir.Store("d", (c_place(i),), kir.Load("acc", (const(i),), F32)) for i in range(4)],
        ],
        launch=kir.Launch((1, 1, 1), (32 * WARPS, 1, 1)),
    )


def sixteen_bit_operands(dtype: torch.dtype):
    """Random A (16 x 16), B (16 x 8) of ``dtype`` and C (16 x 8, float32) of every warp."""
    return (torch.randn(WARPS, 16, 16).to(dtype), torch.randn(WARPS, 16, 8).to(dtype), torch.randn(WARPS, 16, 8))

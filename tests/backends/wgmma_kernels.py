"""Kernel IR kernels for Hopper's warpgroup mma (``WgmmaTf32``), with their operands.

``warpgroup_product`` computes ``d = a @ b^T + c`` for a (64 x warpgroups) x K ``a`` and an
n x K ``b``: every thread copies its share of both into swizzled shared arrays, fences them
for the asynchronous proxy, and each warpgroup runs one wgmma per eight k on its 64 rows,
reading A from shared memory or, with ``a_from_registers``, from the values of A each thread
reads into its registers first (``a_from = "registers"``).
Its keyword arguments leave out one piece of that protocol each, for the tests that check
the simulator notices.
"""

from __future__ import annotations

import torch

from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
TX = kir.thread_idx("x")
ROW = 32
"""Elements in a row of a swizzled array: 128 bytes of float32."""


def thread_coordinates() -> list:
    """Each thread's ``tid``, its warpgroup ``group``, its ``warp`` in it, its ``lane``, and the
    lane's row ``g`` and column pair ``t`` in a wgmma's accumulators."""
    tid, lane = Var("tid"), Var("lane")
    return [
        kir.Declare("tid", dtypes.index, TX),
        kir.Declare("group", dtypes.index, tid // 128),
        kir.Declare("warp", dtypes.index, tid // 32 % 4),
        kir.Declare("lane", dtypes.index, tid % 32),
        kir.Declare("g", dtypes.index, lane // 4),
        kir.Declare("t", dtypes.index, lane % 4),
    ]


def accumulator_place(p: int, n: int):
    """Where accumulator ``p`` of the thread lies in the row-major (64 warpgroups) x ``n`` result."""
    group, warp, g, t = Var("group"), Var("warp"), Var("g"), Var("t")
    j, h, column = p // 4, p % 4 // 2, p % 2
    return (group * 64 + warp * 16 + g + 8 * h) * n + 8 * j + 2 * t + column


def warpgroup_product(warpgroups: int = 2, n: int = 32, k: int = 16, *, proxy_fence: bool = True,
                      wgmma_fence: bool = True, wait: bool = True, accumulate: bool = True,
                      running: int | None = None, a_row: int | None = None, a_from_registers: bool = False,
                      overwrite_a: bool = False) -> kir.Kernel:
    """``d = a @ b^T + c`` (``c`` ignored without ``accumulate``), one wgmma per eight k.

    ``proxy_fence``, ``wgmma_fence`` and ``wait`` drop the fence after the copies, the fence
    before the wgmma and the wait before the accumulators are stored; ``running`` runs the
    wgmma in only that many threads; ``a_row`` makes every warpgroup read A from that row;
    ``overwrite_a`` (with ``a_from_registers``) writes a register of A before the wait."""
    threads, m = 128 * warpgroups, 64 * warpgroups
    tid, group, warp = Var("tid"), Var("group"), Var("warp")
    g, t, e, i = Var("g"), Var("t"), Var("e"), Var("i")
    body: list = thread_coordinates()
    for name, rows in (("a", m), ("b", n)):
        copy = [kir.Declare("e", dtypes.index, tid + i * threads),
                kir.If(op("lt", e, rows * k), [
                    kir.Store(f"{name}_tile", (e // k, e % k), kir.Load(name, (e,), F32))])]
        body.append(kir.For("i", const(0), const(-(-rows * k // threads)), 1, copy, unroll=True))
    if proxy_fence:
        body.append(kir.AsyncProxyFence())
    body.append(kir.Barrier())

    accumulators = [(const(p),) for p in range(n // 2)]
    body += [kir.Store("acc", (const(p),), kir.Load("c", (accumulator_place(p, n),), F32)) for p in range(n // 2)]
    row = group * 64 if a_row is None else const(a_row)
    if a_from_registers:
        for s in range(0, k, kir.WGMMA_K):
            for v in range(4):
                at = (group * 64 + warp * 16 + g + 8 * (v % 2), t + s + 4 * (v // 2))
                body.append(kir.Store("a_values", (const(s // 8), const(v)), kir.Load("a_tile", at, F32)))
        steps = [kir.WgmmaTf32("acc", accumulators,
                               [kir.Load("a_values", (const(s // 8), const(v)), F32) for v in range(4)], (),
                               "b_tile", (const(0), const(s)), n, accumulate or s > 0, a_from="registers")
                 for s in range(0, k, kir.WGMMA_K)]
    else:
        steps = [kir.WgmmaTf32("acc", accumulators, "a_tile", (row, const(s)), "b_tile", (const(0), const(s)), n,
                               accumulate or s > 0)
                 for s in range(0, k, kir.WGMMA_K)]
    issue = ([kir.WgmmaFence()] if wgmma_fence else []) + steps + [kir.WgmmaCommit()]
    body += issue if running is None else [kir.If(op("lt", tid, running), issue)]
    if overwrite_a:
        body.append(kir.Store("a_values", (const(0), const(0)), const(0.0, F32)))
    if wait:
        body.append(kir.WgmmaWait(0))
    body += [kir.Store("d", (accumulator_place(p, n),), kir.Load("acc", (const(p),), F32)) for p in range(n // 2)]
    return kir.Kernel(
        name="wgmma",
        params=[kir.Param("a", F32, m * k), kir.Param("b", F32, n * k), kir.Param("c", F32, m * n),
                kir.Param("d", F32, m * n, writable=True)],
        arrays=[kir.Array("a_tile", F32, (m, ROW), "shared", swizzle=128),
                kir.Array("b_tile", F32, (n, ROW), "shared", swizzle=128),
                kir.Array("acc", F32, (n // 2,), "register"),
                *([kir.Array("a_values", F32, (k // kir.WGMMA_K, 4), "register")] if a_from_registers else [])],
        body=body,
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )


def operands(warpgroups: int = 2, n: int = 32, k: int = 16):
    """Random a (64 warpgroups x k), b (n x k) and c (64 warpgroups x n)."""
    m = 64 * warpgroups
    return torch.randn(m, k), torch.randn(n, k), torch.randn(m, n)


def buffers(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> dict[str, torch.Tensor]:
    """The kernel's flat parameters, ``d`` filled with NaN."""
    return {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(),
            "d": torch.full((a.shape[0] * b.shape[0],), float("nan"))}


def sixteen_bit_product_from_registers(dtype: dtypes.DType, warpgroups: int = 1, n: int = 32, k: int = 32, *,
                                       overwrite_a: bool = False) -> kir.Kernel:
    """``d = a @ b^T`` on 16-bit operands, A from registers: each thread packs its elements of the
    float32 ``a`` into pairs of ``dtype`` (``PackedPair``), B is copied into a swizzled shared
    array of ``dtype``, one wgmma per 16 k. ``overwrite_a`` writes a word of A before the wait."""
    threads, m, row = 128 * warpgroups, 64 * warpgroups, kir.SWIZZLE_BYTES // dtype.itemsize
    tid, group, warp = Var("tid"), Var("group"), Var("warp")
    g, t, e, i = Var("g"), Var("t"), Var("e"), Var("i")
    body: list = [
        *thread_coordinates(),
        kir.For("i", const(0), const(-(-n * k // threads)), 1, [
            kir.Declare("e", dtypes.index, tid + i * threads),
            kir.If(op("lt", e, n * k), [kir.Store("b_tile", (e // k, e % k), kir.Load("b", (e,), dtype))])],
            unroll=True),
        kir.AsyncProxyFence(),
        kir.Barrier(),
    ]
    steps = k // 16
    for s in range(steps):
        for v in range(4):
            r = group * 64 + warp * 16 + g + 8 * (v % 2)
            column = 16 * s + 2 * t + 8 * (v // 2)
            pair = kir.PackedPair(kir.Load("a", (r * k + column,), F32), kir.Load("a", (r * k + column + 1,), F32),
                                  dtype)
            body.append(kir.Store("a_words", (const(4 * s + v),), pair))
    accumulators = [(const(p),) for p in range(n // 2)]
    body.append(kir.WgmmaFence())
    body += [kir.Wgmma("acc", accumulators, [kir.Load("a_words", (const(4 * s + v),), dtypes.int32) for v in range(4)],
                       (), "b_tile", (const(0), const(16 * s)), n, s > 0, a_from="registers", operand_dtype=dtype)
             for s in range(steps)]
    body.append(kir.WgmmaCommit())
    if overwrite_a:
        body.append(kir.Store("a_words", (const(0),), const(0, dtypes.int32)))
    body.append(kir.WgmmaWait(0))

    body += [kir.Store("d", (accumulator_place(p, n),), kir.Load("acc", (const(p),), F32)) for p in range(n // 2)]
    return kir.Kernel(
        name="wgmma_registers",
        params=[kir.Param("a", F32, m * k), kir.Param("b", dtype, n * k), kir.Param("d", F32, m * n, writable=True)],
        arrays=[kir.Array("b_tile", dtype, (n, row), "shared", swizzle=128),
                kir.Array("acc", F32, (n // 2,), "register"),
                kir.Array("a_words", dtypes.int32, (4 * steps,), "register")],
        body=body,
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )

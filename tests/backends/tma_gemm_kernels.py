"""A hand-assembled Hopper GEMM in Kernel IR: TMA into a ring of swizzled stages guarded by
mbarriers, a producer warpgroup and a consumer warpgroup that runs bf16 or fp16 wgmma.

``tma_gemm`` computes ``c = a @ b^T`` in float32 for a (m x k) ``a`` and an (n x k) ``b``, one
block per (block_m x block_n) tile of ``c``. Thread 0 (the producer) waits until a stage is
empty, arrives on its full barrier expecting the bytes of both boxes, and copies the boxes of A
and B of the next 64 columns of k into it; the zero-filled elements past the edges count too.
The consumer warpgroup waits until the stage is full, runs ``block_m / 64`` wgmma per 16 columns
of k, waits for them and releases the stage (its 128 threads arrive on the empty barrier), then
stores the accumulators that fall inside ``c``.
With ``tma_store``, the consumers put the accumulators in a shared tile instead, fence them for
the async proxy, and after a barrier of the whole block thread 0 stores the tile with one TMA
copy, which writes only what falls inside ``c``.
Its keyword arguments plant one fault each, for the tests that check the simulator notices:
``release_before_wait`` releases a stage before waiting for the wgmma that read it,
``extra_transaction_bytes`` makes the producer expect bytes that no copy brings, and
``store_fence = False`` drops the fence before the TMA store.
"""

from __future__ import annotations

import torch

from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
BLOCK_K = 64
"""Columns of k per stage: 128 bytes of a 16-bit type, the swizzle's row."""
WARPGROUP = 128


def tma_gemm(m: int, n: int, k: int, *, dtype=dtypes.bfloat16, block_m: int = 64, block_n: int = 32,
             stages: int = 3, release_before_wait: bool = False, extra_transaction_bytes: int = 0,
             tma_store: bool = False, store_fence: bool = True) -> kir.Kernel:
    slices, k_tiles = block_m // 64, -(-k // BLOCK_K)
    tid, kt, s, rnd = Var("tid"), Var("kt"), Var("s"), Var("round")
    warp, g, t = Var("warp"), Var("g"), Var("t")
    box_bytes = (block_m + block_n) * BLOCK_K * dtype.itemsize
    stage = [kir.Declare("s", dtypes.index, kt % stages), kir.Declare("round", dtypes.index, kt // stages)]
    produce = kir.For("kt", const(0), const(k_tiles), 1, [
        *stage,
        kir.MbarrierWait("empty", (s,), (rnd + 1) % 2),
        kir.MbarrierArrive("full", (s,), box_bytes + extra_transaction_bytes),
        kir.TmaLoad("a_tile", (s, const(0), const(0)), "a_map", kir.block_idx("y") * block_m, kt * BLOCK_K,
                    "full", (s,)),
        kir.TmaLoad("b_tile", (s, const(0), const(0)), "b_map", kir.block_idx("x") * block_n, kt * BLOCK_K,
                    "full", (s,)),
    ])
    products = [
        kir.Wgmma("acc", [(const(q), const(p)) for p in range(block_n // 2)], "a_tile", (s, const(64 * q), const(16 * j)),
                  "b_tile", (s, const(0), const(16 * j)), block_n, operand_dtype=dtype)
        for j in range(BLOCK_K // 16) for q in range(slices)
    ]
    wait = [kir.WgmmaWait(0)]
    consume = kir.For("kt", const(0), const(k_tiles), 1, [
        *stage,
        kir.MbarrierWait("full", (s,), rnd % 2),
        kir.WgmmaFence(),
        *products,
        kir.WgmmaCommit(),
        *([] if release_before_wait else wait),
        kir.MbarrierArrive("empty", (s,)),
    ])
    body = [
        kir.Declare("tid", dtypes.index, kir.thread_idx("x")),
        kir.If(op("eq", tid, 0), [
            st for i in range(stages) for st in (kir.MbarrierInit("full", (const(i),), 1),
                                                 kir.MbarrierInit("empty", (const(i),), WARPGROUP))]),
        kir.Barrier(),
        kir.If(op("lt", tid, WARPGROUP), [kir.If(op("eq", tid, 0), [produce])], [
            *[kir.Store("acc", (const(q), const(p)), const(0.0, F32)) for q in range(slices) for p in range(block_n // 2)],
            consume,
            *(wait if release_before_wait else []),
            *(_shared_epilogue(block_n, slices, store_fence) if tma_store else _epilogue(m, n, block_m, block_n, slices)),
        ]),
    ]
    a_map = kir.TensorMap("a_map", "a", (m, k), k, (block_m, BLOCK_K), 128)
    b_map = kir.TensorMap("b_map", "b", (n, k), k, (block_n, BLOCK_K), 128)
    maps, arrays = [a_map, b_map], []
    if tma_store:
        body += [kir.Barrier(), kir.If(op("eq", tid, 0), [
            kir.TmaStore("c_map", kir.block_idx("y") * block_m, kir.block_idx("x") * block_n, "c_tile",
                         (const(0), const(0))),
            kir.TmaStoreCommit(),
            kir.TmaStoreWait(0),
        ])]
        maps.append(kir.TensorMap("c_map", "c", (m, n), n, (block_m, block_n)))
        arrays.append(kir.Array("c_tile", F32, (block_m, block_n), "shared"))
    return kir.Kernel(
        "tma_gemm",
        [kir.Param("a", dtype, m * k), kir.Param("b", dtype, n * k), kir.Param("c", F32, m * n, writable=True)],
        [kir.Array("a_tile", dtype, (stages, block_m, BLOCK_K), "shared", swizzle=128),
         kir.Array("b_tile", dtype, (stages, block_n, BLOCK_K), "shared", swizzle=128),
         kir.Array("full", dtypes.int64, (stages,), "shared"),
         kir.Array("empty", dtypes.int64, (stages,), "shared"),
         kir.Array("acc", F32, (slices, block_n // 2), "register"), *arrays],
        body,
        kir.Launch((-(-n // block_n), -(-m // block_m), 1), (2 * WARPGROUP, 1, 1)),
        tensor_maps=maps,
    )


def _shared_epilogue(block_n: int, slices: int, fence: bool) -> list:
    """Each consumer thread puts its accumulators in the shared tile of c, then fences them for the TMA unit."""
    tid, warp, g, t = Var("tid"), Var("warp"), Var("g"), Var("t")
    lines = [
        kir.Declare("warp", dtypes.index, (tid - WARPGROUP) // 32),
        kir.Declare("g", dtypes.index, tid % 32 // 4),
        kir.Declare("t", dtypes.index, tid % 4),
    ]
    for q in range(slices):
        for p in range(block_n // 2):
            j, h, e = p // 4, p % 4 // 2, p % 2
            lines.append(kir.Store("c_tile", (64 * q + warp * 16 + g + 8 * h, 8 * j + t * 2 + e),
                                   kir.Load("acc", (const(q), const(p)), F32)))
    return lines + ([kir.AsyncProxyFence()] if fence else [])


def _epilogue(m: int, n: int, block_m: int, block_n: int, slices: int) -> list:
    """Each consumer thread stores its accumulators that fall inside c: lane 4 g + t of warp w holds
    ``D[16 w + g + 8 h][8 j + 2 t + e]`` of slice q in ``acc[q][4 j + 2 h + e]``."""
    tid, warp, g, t = Var("tid"), Var("warp"), Var("g"), Var("t")
    row, column = Var("row"), Var("column")
    lines = [
        kir.Declare("warp", dtypes.index, (tid - WARPGROUP) // 32),
        kir.Declare("g", dtypes.index, tid % 32 // 4),
        kir.Declare("t", dtypes.index, tid % 4),
        kir.Declare("row", dtypes.index, const(0)),
        kir.Declare("column", dtypes.index, const(0)),
    ]
    for q in range(slices):
        for p in range(block_n // 2):
            j, h, e = p // 4, p % 4 // 2, p % 2
            lines += [
                kir.Assign("row", kir.block_idx("y") * block_m + 64 * q + warp * 16 + g + 8 * h),
                kir.Assign("column", kir.block_idx("x") * block_n + 8 * j + t * 2 + e),
                kir.If(op("and", op("lt", row, m), op("lt", column, n)), [
                    kir.Store("c", (row * n + column,), kir.Load("acc", (const(q), const(p)), F32))]),
            ]
    return lines


def operands(m: int, n: int, k: int, dtype=torch.bfloat16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(n, k, generator=generator).to(dtype)
    return a, b


def buffers(a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """The kernel's arguments; c starts as NaN, so that an element left unwritten shows."""
    return {"a": a.flatten().clone(), "b": b.flatten().clone(),
            "c": torch.full((a.shape[0] * b.shape[0],), float("nan"))}

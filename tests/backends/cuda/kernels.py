"""Hand-written Kernel IR kernels that the CUDA backend's tests print, compile and run."""

from __future__ import annotations

from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

F32 = dtypes.float32
TILE = 16
THREADS = 8  # per axis; each thread computes a 2x2 register tile


def tiled_matmul(m: int, n: int, k: int) -> kir.Kernel:
    """``c = a @ b + bias`` (bias int32, cast to float) with 16x16 tiles staged through shared
    memory by cp.async, 2x2 outputs per thread in registers, and guards for ragged edges."""
    tx, ty = kir.thread_idx("x"), kir.thread_idx("y")
    bx, by = kir.block_idx("x"), kir.block_idx("y")
    row0, col0, t, k0 = Var("row0"), Var("col0"), Var("t"), Var("k0")
    e, kk, i, j = Var("e"), Var("kk"), Var("i"), Var("j")

    def acc(a, b):
        return kir.Load("acc", (a, b), F32)

    element = e * (THREADS * THREADS) + t
    loads = kir.For("e", const(0), const(TILE * TILE // (THREADS * THREADS)), 1, [
        kir.CpAsync("As", (element // TILE, element % TILE), "a",
                    ((by * TILE + element // TILE) * k + k0 + element % TILE,), 4,
                    op("and", op("lt", by * TILE + element // TILE, m), op("lt", k0 + element % TILE, k))),
        kir.CpAsync("Bs", (element // TILE, element % TILE), "b",
                    ((k0 + element // TILE) * n + bx * TILE + element % TILE,), 4,
                    op("and", op("lt", k0 + element // TILE, k), op("lt", bx * TILE + element % TILE, n))),
    ], unroll=True)
    product = op("mul", kir.Load("As", (ty * 2 + i, kk), F32), kir.Load("Bs", (kk, tx * 2 + j), F32))
    body = [
        kir.Comment("each thread owns a 2x2 tile of c"),
        kir.Declare("row0", dtypes.index, by * TILE + ty * 2),
        kir.Declare("col0", dtypes.index, bx * TILE + tx * 2),
        kir.Declare("t", dtypes.index, ty * THREADS + tx),
        kir.For("i", const(0), const(2), 1, [
            kir.For("j", const(0), const(2), 1, [kir.Store("acc", (i, j), ex.const(0.0))], unroll=True),
        ], unroll=True),
        kir.For("k0", const(0), const(k), TILE, [
            loads,
            kir.CpAsyncCommit(),
            kir.CpAsyncWait(0),
            kir.Barrier(),
            kir.For("kk", const(0), const(TILE), 1, [
                kir.For("i", const(0), const(2), 1, [
                    kir.For("j", const(0), const(2), 1, [
                        kir.Store("acc", (i, j), op("add", acc(i, j), product)),
                    ], unroll=True),
                ], unroll=True),
            ], unroll=True),
            kir.Barrier(),
        ]),
        kir.For("i", const(0), const(2), 1, [
            kir.For("j", const(0), const(2), 1, [
                kir.If(op("and", op("lt", row0 + i, m), op("lt", col0 + j, n)), [
                    kir.Store("c", ((row0 + i) * n + col0 + j,),
                              op("add", acc(i, j), ex.cast(kir.Load("bias", (col0 + j,), dtypes.int32), F32))),
                ]),
            ], unroll=True),
        ], unroll=True),
    ]
    return kir.Kernel(
        name="tiled_matmul",
        params=[kir.Param("a", F32, m * k), kir.Param("b", F32, k * n),
                kir.Param("bias", dtypes.int32, n), kir.Param("c", F32, m * n, writable=True)],
        arrays=[kir.Array("As", F32, (TILE, TILE + 1), "shared"), kir.Array("Bs", F32, (TILE, TILE + 1), "shared"),
                kir.Array("acc", F32, (2, 2), "register")],
        body=body,
        launch=kir.Launch((-(-n // TILE), -(-m // TILE), 1), (THREADS, THREADS, 1)),
    )


def elementwise(n: int, block: int = 128, dtype: dtypes.DType = F32, name: str = "elementwise") -> kir.Kernel:
    """``y = where(x > 0, x * w + 0.5, sigmoid(x)) * exp(-|w|)``, one element per thread."""
    i = Var("i")
    x = kir.Load("x", (i,), dtype)
    w = kir.Load("w", (i,), dtype)
    value = op("mul",
               op("where", op("gt", x, 0.0), op("add", op("mul", x, w), 0.5), op("sigmoid", x)),
               op("exp", op("neg", op("abs", w))))
    body = [
        kir.Declare("i", dtypes.index, kir.block_idx() * block + kir.thread_idx()),
        kir.If(op("lt", i, n), [kir.Store("y", (i,), value)]),
    ]
    return kir.Kernel(
        name=name,
        params=[kir.Param("x", dtype, n), kir.Param("w", dtype, n), kir.Param("y", dtype, n, writable=True)],
        arrays=[], body=body,
        launch=kir.Launch((-(-n // block), 1, 1), (block, 1, 1)),
    )


def reversed_halves(n: int, block: int = 256) -> kir.Kernel:
    """``y[i] = x[n - 1 - i] * 0.5 + 1``, one element per thread: the first blocks read what
    the last blocks of a kernel that wrote ``x`` wrote last."""
    i = Var("i")
    body = [
        kir.Declare("i", dtypes.index, kir.block_idx() * block + kir.thread_idx()),
        kir.If(op("lt", i, n), [kir.Store("y", (i,), op("add", op("mul", kir.Load("x", (n - 1 - i,), F32), 0.5), 1.0))]),
    ]
    return kir.Kernel(
        name="reversed_halves",
        params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True)],
        arrays=[], body=body,
        launch=kir.Launch((-(-n // block), 1, 1), (block, 1, 1)),
    )


def reverse_blocks(blocks: int, per_block: int, threads: int = 256) -> kir.Kernel:
    """Each block stages ``per_block`` floats of x in shared memory and writes them reversed:
    with 16384 floats (64 KiB) that needs dynamic shared memory."""
    tx, bx, s = kir.thread_idx(), kir.block_idx(), Var("s")
    body = [
        kir.For("s", const(0), const(per_block), threads, [
            kir.Store("stage", (s + tx,), kir.Load("x", (bx * per_block + s + tx,), F32)),
        ]),
        kir.Barrier(),
        kir.For("s", const(0), const(per_block), threads, [
            kir.Store("y", (bx * per_block + s + tx,), kir.Load("stage", (per_block - 1 - s - tx,), F32)),
        ]),
    ]
    n = blocks * per_block
    return kir.Kernel(
        name="reverse_blocks",
        params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True)],
        arrays=[kir.Array("stage", F32, (per_block,), "shared")],
        body=body,
        launch=kir.Launch((blocks, 1, 1), (threads, 1, 1)),
    )


def staged_transpose(tiles: int = 4, size: int = 64) -> kir.Kernel:
    """Transposes ``tiles`` square tiles of x at once through one padded 3-D shared array
    (``tiles * size * (size + 1)`` floats: past 48 KiB at the defaults)."""
    tx, s, r = kir.thread_idx(), Var("s"), Var("r")
    flat = s * (size * size) + r * size + tx
    body = [
        kir.For("s", const(0), const(tiles), 1, [
            kir.For("r", const(0), const(size), 1, [kir.Store("tile", (s, r, tx), kir.Load("x", (flat,), F32))]),
        ]),
        kir.Barrier(),
        kir.For("s", const(0), const(tiles), 1, [
            kir.For("r", const(0), const(size), 1, [kir.Store("y", (flat,), kir.Load("tile", (s, tx, r), F32))]),
        ]),
    ]
    n = tiles * size * size
    return kir.Kernel(
        name="staged_transpose",
        params=[kir.Param("x", F32, n), kir.Param("y", F32, n, writable=True)],
        arrays=[kir.Array("tile", F32, (tiles, size, size + 1), "shared")],
        body=body,
        launch=kir.Launch((1, 1, 1), (size, 1, 1)),
    )

"""Small Kernel IR kernels around one TMA copy and one mbarrier, for the simulator's and the
CUDA backend's tests.

``box_copy`` has thread 0 initialise an mbarrier, arrive on it expecting the bytes of one box,
and copy the box at (``row``, ``column``) of an (``rows`` x ``columns``) tensor into a shared
tile; then every thread waits for the phase and copies the tile out, element ``e`` by thread
``e % 128``. Its keyword arguments drop the wait or the barrier after the init, or change the
bytes expected, for the tests that check the simulator notices. ``stored_back`` then stores the
box with a TMA store to a tensor it overlaps only in part.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

THREADS = 128


def box_copy(rows: int, columns: int, box: tuple[int, int], row: int, column: int, *, dtype=dtypes.bfloat16,
             swizzle: int = 128, row_stride: int | None = None, wait: bool = True, barrier_after_init: bool = True,
             extra_bytes: int = 0, arrivals: int = 1) -> kir.Kernel:
    tid, e, i = Var("tid"), Var("e"), Var("i")
    stride = columns if row_stride is None else row_stride
    count = box[0] * box[1]
    body = [
        kir.Declare("tid", dtypes.index, kir.thread_idx("x")),
        kir.If(op("eq", tid, 0), [kir.MbarrierInit("full", (const(0),), arrivals)]),
        *([kir.Barrier()] if barrier_after_init else []),
        kir.If(op("eq", tid, 0), [
            kir.MbarrierArrive("full", (const(0),), count * dtype.itemsize + extra_bytes),
            kir.TmaLoad("tile", (const(0), const(0)), "map", const(row), const(column), "full", (const(0),)),
        ]),
        *([kir.MbarrierWait("full", (const(0),), const(0))] if wait else []),
        kir.For("i", const(0), const(-(-count // THREADS)), 1, [
            kir.Declare("e", dtypes.index, tid + i * THREADS),
            kir.If(op("lt", e, count), [
                kir.Store("out", (e,), kir.Load("tile", (e // box[1], e % box[1]), dtype))]),
        ]),
    ]
    return kir.Kernel(
        "box_copy",
        [kir.Param("x", dtype, (rows - 1) * stride + columns), kir.Param("out", dtype, count, writable=True)],
        [kir.Array("tile", dtype, box, "shared", swizzle=swizzle), kir.Array("full", dtypes.int64, (1,), "shared")],
        body,
        kir.Launch((1, 1, 1), (THREADS, 1, 1)),
        tensor_maps=[kir.TensorMap("map", "x", (rows, columns), stride, box, swizzle)],
    )


def expected_box(x, rows: int, columns: int, box: tuple[int, int], row: int, column: int, row_stride: int | None = None):
    """The box as the TMA copies it: the tensor's elements, zeros outside it."""
    import torch

    stride = columns if row_stride is None else row_stride
    out = torch.zeros(box, dtype=x.dtype)
    for r in range(box[0]):
        for c in range(box[1]):
            if 0 <= row + r < rows and 0 <= column + c < columns:
                out[r, c] = x[(row + r) * stride + column + c]
    return out.flatten()


def stored_back(*, wait: bool = True, overwrite: bool = False, column: int = 8):
    """Thread 0 copies a box in and, after the wait, stores it to an (11 x 40) tensor at (5, ``column``):
    only the part inside is written. ``wait`` drops the store's wait, ``overwrite`` writes the tile
    before it."""
    kernel = box_copy(16, 64, (8, 64), 0, 0, arrivals=1)
    tail = [kir.TmaStore("y_map", const(5), const(column), "tile", (const(0), const(0))), kir.TmaStoreCommit()]
    tail += [kir.Store("tile", (const(0), const(0)), const(0.0, dtypes.bfloat16))] if overwrite else []
    tail += [kir.TmaStoreWait(0)] if wait else []
    return attrs.evolve(
        kernel, params=kernel.params + (kir.Param("y", dtypes.bfloat16, 11 * 40, writable=True),),
        body=kernel.body + (kir.If(op("eq", kir.thread_idx(), 0), tail),),
        tensor_maps=kernel.tensor_maps + (kir.TensorMap("y_map", "y", (11, 40), 40, (8, 64), 128),))

"""The contraction schedule's decisions for one knob setting, written as Tile IR.

A block of ``threads_n`` x ``threads_m`` (x ``splits``) threads computes a BM x BN tile of
the output. Each thread holds a ``thread_m`` x ``thread_n`` register tile whose rows and
columns come in runs of ``fragment_width`` adjacent ones, the runs ``threads *
fragment_width`` apart (with a width of 1, single rows ``threads_m`` apart and columns
``threads_n`` apart), so that the threads of a warp, which cover a compact patch of
consecutive runs, read consecutive shared-memory words or the same word: no bank
conflicts. A run of four is one 16-byte read, a quarter of the load instructions that
single elements take, which is what limits the inner loop. The reduction runs in k-tiles of BK: each operand's BK-deep strip is copied into
shared memory, stored k-major so that the inner loop reads a row of it, padded against
bank conflicts and multi-buffered so that copies of later k-tiles overlap the arithmetic
on this one. With ``in_block_k_splits`` > 1 the thread groups take equal slices of each
k-tile and add up their register tiles through shared memory, a tree, before one epilogue. With
``products = mma_sync`` the products run as mma on the tensor cores instead, each warp an 8 x 4
patch of threads whose register tiles are the mma's accumulators (``mma_sync.products``).
"""

from __future__ import annotations

import functools
import math

from lamina.core.ir import expr as ex, index, kernel_ir, loop_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction import arrangement, copy_issue, copy_layout, unneeded_blocks, unread_outputs
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.wgmma import products as wgmma_products
from lamina.plugins.schedules.contraction.wgmma_tma import setting as tma_setting, tiling as tma_tiling
from lamina.plugins.schedules.contraction.knobs import Choices
from lamina.plugins.schedules.contraction.layout import store_width
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand
from lamina.plugins.schedules.contraction.settings import ContractionSettings

SCHEDULE_NAME = "contraction"
MAX_GRID_YZ = 65535
MAX_THREADS_Z = 64
CP_ASYNC_BYTES = (4, 8, 16)
ADDRESS_REGISTERS = 32
"""Registers a thread needs besides its tiles: indices, pointers, loop counters."""


def grid_fits(c: Contraction, block_m: int = 1) -> bool:
    """Whether the blocks along M and the batch fit the grid's y and z limits (at the sizes' hints
    where they are known only at run time: a launch past the limits is an error, never a wrong answer)."""
    c = c.hinted()
    batch = math.prod(c.extents[v] for v in c.batch)
    return batch <= MAX_GRID_YZ and math.ceil(c.extents[c.m] / block_m) <= MAX_GRID_YZ


def _contiguous_dim(c: Contraction, operand: Operand, dims: tuple[str, ...]) -> int | None:
    return _contiguous_position(operand.load, c.kernel.buffer(operand.load.buffer).type.shape, dims)


@functools.lru_cache(maxsize=4096)
def _linear_offset(load: loop_ir.Load, shape: tuple[int, ...]) -> ex.Expr:
    """The load's flat offset; the cost model asks for it once per candidate setting."""
    return index.linearize(load.index, shape)


@functools.lru_cache(maxsize=4096)
def _contiguous_position(load: loop_ir.Load, shape: tuple[int, ...], dims: tuple[str, ...]) -> int | None:
    offset = _linear_offset(load, shape)
    for position, var in enumerate(dims):
        if index.coefficient(offset, var) == 1:
            return position
    return None


def _widest_copy(c: Contraction, operand: Operand, dims: tuple[str, ...], contiguous: int | None) -> int:
    """The most elements along the tile's inner dimension that one aligned copy may move.

    Every run of that many elements must start at an aligned address and lie wholly inside
    or wholly outside the tensor: the axis's extent, every other stride and the constant
    offset are multiples of it.
    """
    if contiguous != len(dims) - 1:
        return 1
    return _widest_run(operand.load, c.kernel.buffer(operand.load.buffer).type.shape, dims[-1], c.extents[dims[-1]])


@functools.lru_cache(maxsize=4096)
def _widest_run(load: loop_ir.Load, shape: tuple[int, ...], inner: str, inner_extent: int) -> int:
    """``_widest_copy`` of a load whose offset is contiguous along ``inner``; kept, as the offset is."""
    form = index.affine(_linear_offset(load, shape))
    steps = []
    for atom, coef in form.terms.items():
        if not isinstance(atom, ex.Var):
            return 1
        if atom.name != inner:
            steps.append(coef)
    widest = 16 // load.dtype.itemsize
    while widest > 1:
        if all(s % widest == 0 for s in (*steps, form.constant, inner_extent)):
            return widest
        widest //= 2
    return 1


def copy_kind(target: Target, itemsize: int) -> str:
    """``cp.async`` where the target has it for elements of this size, else loads through registers."""
    return "cp.async" if target.compute_capability >= 80 and itemsize in CP_ASYNC_BYTES else "load_store"


def copies_asynchronously(c: Contraction, target: Target) -> bool:
    """Whether every operand is copied into shared memory with ``cp.async``."""
    return all(copy_kind(target, o.load.dtype.itemsize) == "cp.async" for o in c.operands)


def stage_for(c: Contraction, operand: Operand, choices: Choices, target: Target) -> tile_ir.SharedStage:
    if wgmma_products.uses(choices):
        return _swizzled_stage(c, operand, choices)
    r = c.reduce_var
    if operand.side == "m":
        dims, tile = (r, c.m), (choices.block_k, choices.block_m)
    elif operand.side == "n":
        dims, tile = (r, c.n), (choices.block_k, choices.block_n)
    else:
        dims, tile = (r,), (choices.block_k,)
    dtype = operand.load.dtype
    copy = copy_kind(target, dtype.itemsize)
    contiguous = _contiguous_dim(c, operand, dims)
    widest = _widest_copy(c, operand, dims, contiguous) if copy == "cp.async" else 1
    alignment = choices.fragment_width if operand.side in ("m", "n") else 1
    if choices.padding is not None:
        padding = choices.padding
    elif choices.on_tensor_cores:
        padding = mma_sync.padding(tile[-1])
    else:
        padding = copy_layout.choose_padding(tile, dtype.itemsize, contiguous, widest, alignment)
    padding = padding if len(tile) == 2 else 0
    order = copy_layout.choose_copy_order(tile, padding, dtype.itemsize, contiguous, widest)
    return tile_ir.SharedStage(
        buffer=operand.load.buffer,
        index=operand.text,
        dims=dims,
        tile=tile,
        dtype=dtype,
        padding=padding,
        buffers=choices.buffers,
        copy=copy,
        copy_bytes=dtype.itemsize * order.width,
    )


def _k_major_dims(c: Contraction, operand: Operand) -> tuple[str, str]:
    return (c.m if operand.side == "m" else c.n, c.reduce_var)


def _swizzled_stage(c: Contraction, operand: Operand, choices: Choices) -> tile_ir.SharedStage:
    """The operand's k-tiles row by row, K-major, in the 128-byte swizzle that wgmma reads:
    ``cp.async`` in 16-byte runs where the operand is contiguous along the reduction in such
    runs, else (16-bit operands only: a convolution's window) element by element."""
    dims = _k_major_dims(c, operand)
    block = choices.block_m if operand.side == "m" else choices.block_n
    dtype = operand.load.dtype
    run = kernel_ir.SWIZZLE_BYTES // wgmma_products.SWIZZLE_CHUNKS // dtype.itemsize
    aligned = _widest_copy(c, operand, dims, _contiguous_dim(c, operand, dims)) >= run
    return tile_ir.SharedStage(
        buffer=operand.load.buffer, index=operand.text, dims=dims, tile=(block, wgmma_products.block_k(c)),
        dtype=dtype, padding=0, buffers=choices.buffers, copy="cp.async" if aligned else "load_store",
        copy_bytes=run * dtype.itemsize if aligned else dtype.itemsize, swizzle=kernel_ir.SWIZZLE_BYTES)


def _wgmma_operand_problem(c: Contraction) -> str | None:
    """Why a float32 operand cannot be copied into swizzled rows 16 bytes at a time, or None
    (16-bit operands are staged element by element where they must be)."""
    if wgmma_products.sixteen_bit(c):
        return None
    for operand in c.operands:
        dims = _k_major_dims(c, operand)
        widest = _widest_copy(c, operand, dims, _contiguous_dim(c, operand, dims))
        if widest < wgmma_products.COPY_ELEMENTS:
            return wgmma_products.unaligned_operand(c, operand)
    return None


def copy_order(c: Contraction, stage: tile_ir.SharedStage) -> copy_layout.CopyOrder:
    """How the threads share out the copy of ``stage`` (the same answer for scheduling and lowering)."""
    operand = c.operand(stage.index)
    contiguous = _contiguous_dim(c, operand, stage.dims)
    widest = stage.copy_bytes // stage.dtype.itemsize
    return copy_layout.choose_copy_order(stage.tile, stage.padding, stage.dtype.itemsize, contiguous, widest)


def partial_sums_shape(thread_m: int, thread_n: int, threads: int) -> tuple[int, int]:
    """The shared array through which the k-splits add up their register tiles: one column per
    thread, so that the threads of a warp touch consecutive words."""
    return (thread_m * thread_n, threads)


def shared_bytes(c: Contraction, choices: Choices, target: Target) -> int:
    if wgmma_products.uses(choices):
        return wgmma_products.shared_bytes(c, choices)
    staged = sum(stage_for(c, o, choices, target).bytes for o in c.operands)
    if choices.splits == 1:
        return staged
    return staged + math.prod(partial_sums_shape(choices.thread_m, choices.thread_n, choices.threads)) * c.acc_dtype.itemsize


def registers(c: Contraction, choices: Choices) -> int:
    """An estimate of the registers per thread: accumulators, hoisted loads, operand fragments, addresses.

    On tensor cores about as many again as the accumulators: the fragments' pieces and the
    sums of the products in flight (NVRTC gave 2 x 2, 4 x 4 and 8 x 8 tiles 40, 62 and 164
    to 167 registers on mma.sync, a 2 x 32 tile 158 on wgmma)."""
    tile = choices.thread_m * choices.thread_n
    if choices.on_tensor_cores:
        return 2 * tile + ADDRESS_REGISTERS
    fragments = sum({"m": choices.thread_m, "n": choices.thread_n, "k": 1}[o.side] for o in c.operands)
    return tile * (1 + len(c.invariant_loads())) + fragments + ADDRESS_REGISTERS


def _fragment_problem(c: Contraction, choices: Choices) -> str | None:
    width = choices.fragment_width
    if width == 1:
        return None
    if choices.thread_m % width or choices.thread_n % width:
        return f"fragment_width = {width} needs register tiles whose sides are multiples of {width}"
    if choices.padding is not None and choices.padding % width:
        return (f"padding = {choices.padding} would misalign the rows that fragment_width = {width} reads "
                f"{width} at a time: pin 0 or a multiple of {width}")
    for operand in c.operands:
        if operand.side != "k" and width * operand.load.dtype.itemsize not in kernel_ir.VECTOR_BYTES:
            return (f"fragment_width = {width} reads {width * operand.load.dtype.itemsize} B of {operand.text} "
                    f"at once; one access moves {', '.join(map(str, kernel_ir.VECTOR_BYTES))} bytes")
    return None


def illegal(c: Contraction, choices: Choices, target: Target) -> str | None:
    """Why the setting cannot run on ``target``, or None when it can."""
    if tma_setting.uses(choices):
        return tma_setting.problem(c, choices, target) or _grid_problem(c, choices)
    if c.paired is not None:
        return "a kernel that sums two products at once (a gate and its up projection) runs only on products = wgmma_tma"
    if c.pieces:
        return "a kernel of products of one input side by side runs only on products = wgmma_tma"
    if choices.block_m % choices.thread_m or choices.block_n % choices.thread_n:
        return "each block tile must be a whole number of register tiles"
    fragments = _fragment_problem(c, choices)
    if fragments is not None:
        return fragments
    if wgmma_products.uses(choices):
        products = wgmma_products.problem(c, choices, target) or _wgmma_operand_problem(c)
    else:
        products = mma_sync.problem(c, choices, target)
    if products is not None:
        return products
    if choices.block_k % choices.splits:
        return f"block_k = {choices.block_k} must be a multiple of in_block_k_splits = {choices.splits}"
    if c.slice_bound is not None and c.slice_bound.multiple % choices.block_k:
        return (f"block_k = {choices.block_k} must divide {c.slice_bound.multiple}, which every split-K slice's "
                "length is a multiple of, so that each slice is whole k-tiles")
    if choices.splits > MAX_THREADS_Z:
        return f"in_block_k_splits = {choices.splits} exceeds the {MAX_THREADS_Z} threads a block may have along z"
    if choices.threads > target.max_threads_per_block:
        return f"{choices.threads} threads per block exceed {target.name}'s {target.max_threads_per_block}"
    if not grid_fits(c, choices.block_m):
        return f"more than {MAX_GRID_YZ} blocks along y or z"
    if registers(c, choices) > target.registers_per_thread:
        return f"about {registers(c, choices)} registers per thread exceed {target.registers_per_thread}"
    if registers(c, choices) * choices.threads > target.registers_per_block:
        return (f"about {registers(c, choices)} registers for each of {choices.threads} threads exceed the "
                f"{target.registers_per_block} a block may have")
    arrangement_problem = arrangement.problem(choices)
    if arrangement_problem is not None:
        return arrangement_problem
    issue_problem = copy_issue.problem(choices, copies_asynchronously(c, target))
    if issue_problem is not None:
        return issue_problem
    shared = shared_bytes(c, choices, target)
    if shared > target.max_shared_bytes_optin:
        return f"{shared} B of shared memory exceed the {target.max_shared_bytes_optin} B {target.name} allows per block"
    return None


def _fragment_text(c: Contraction, choices: Choices) -> str:
    size = choices.fragment_width * max(o.load.dtype.itemsize for o in c.operands if o.side != "k")
    return f"{choices.fragment_width} ({size}-byte shared-memory reads)"


def column_run(choices: Choices) -> int:
    """The adjacent columns a thread owns in a run: its fragments' width, or an mma accumulator's."""
    return mma_sync.COLUMN_RUN if choices.on_tensor_cores else choices.fragment_width


def _store_text(c: Contraction, choices: Choices) -> str:
    width = store_width(c, column_run(choices))
    sizes = sorted({width * c.kernel.buffer(s.buffer).type.dtype.itemsize for s in c.epilogue})
    count = f"{width} adjacent outputs" if width > 1 else "one output"
    staged = tma_setting.staged_copy(c, choices) if tma_setting.uses(choices) else ""
    if staged == tma_setting.TMA_COPY:
        size = 2 * c.kernel.buffer(c.epilogue[0].buffer).type.dtype.itemsize
        return f"2 adjacent outputs per store ({size} B) into a shared tile, which the TMA copies out"
    return f"{count} per store ({' and '.join(map(str, sizes))} B)" + (
        ", from a shared tile, consecutive threads writing consecutive columns" if staged else "")


def _products_name(c: Contraction, choices: Choices) -> str | None:
    if wgmma_products.uses(choices):
        return wgmma_products.products_name(c)
    return mma_sync.NAME if choices.on_tensor_cores else None


def _grid_problem(c: Contraction, choices: Choices) -> str | None:
    return None if grid_fits(c, choices.block_m) else f"more than {MAX_GRID_YZ} blocks along y or z"


def tile_kernel(c: Contraction, choices: Choices, target: Target, notes: list[tuple[str, object]]) -> tile_ir.TileKernel:
    """The Tile IR of ``choices``, with ``notes`` (how they were chosen) among its knobs."""
    if tma_setting.uses(choices):
        sliced = [("slice_end", f"{c.reduce_var} runs while {c.slice_bound.text(c.reduce_var)}: the last slice "
                                "ends sooner, its last k-tile zero-filled past the end")] if c.slice_bound else []
        return tma_tiling.tile_kernel(c, choices, target,
                                      [("epilogue_stores", _store_text(c, choices)), *sliced, *notes], SCHEDULE_NAME)
    grid = [
        tile_ir.AxisBinding((c.n,), c.extents[c.n], "x", choices.threads_n, choices.thread_n, "x", contiguous=False,
                            group=column_run(choices)),
        tile_ir.AxisBinding((c.m,), c.extents[c.m], "y", choices.threads_m, choices.thread_m, "y", contiguous=False,
                            group=choices.fragment_width),
    ]
    if c.batch:
        batch = math.prod(c.extents[v] for v in c.batch)
        grid.append(tile_ir.AxisBinding(c.batch, batch, "z", 1, 1, "z"))
    strategy = "block_tree" if choices.splits > 1 else "serial"
    reduction = tile_ir.ReductionPlan((c.reduce_var,), c.reduce_extent, strategy, choices.block_k, choices.splits)
    stages = tuple(stage_for(c, o, choices, target) for o in c.operands)
    recorded: list[tuple[str, object]] = [
        ("register_tile", f"{choices.thread_m}x{choices.thread_n}"),
        *([] if choices.on_tensor_cores else [("fragment_width", _fragment_text(c, choices))]),
        ("epilogue_stores", _store_text(c, choices)),
    ]
    if choices.splits > 1:
        shape = partial_sums_shape(choices.thread_m, choices.thread_n, choices.threads)
        array = f"{c.acc_dtype}[{']['.join(map(str, shape))}]"
        recorded.append(("combine", f"{choices.splits} k-splits add up in a tree through shared {array}"))
    if c.slice_bound is not None:
        recorded.append(("slice_end", f"{c.reduce_var} runs while {c.slice_bound.text(c.reduce_var)}: "
                                      "a shorter slice ends at a k-tile sooner"))
    unneeded = unneeded_blocks.describe(c)
    if unneeded is not None:
        recorded.append(("unneeded_product", unneeded))
    unread = unread_outputs.describe(c)
    if unread is not None:
        recorded.append(("unread_outputs", unread))
    recorded += notes
    recorded += [(f"copy {s.index}", copy_layout.describe(copy_order(c, s), s.dims, s.tile)) for s in stages]
    tile = tile_ir.TileKernel(
        kernel=c.kernel, schedule=SCHEDULE_NAME, grid=grid, reduction=reduction, stages=stages, knobs=recorded,
        settings=ContractionSettings(arrangement.warp_patch(choices), choices.grouped_rows or 1,
                                     choices.copy_steps or 0, _products_name(c, choices),
                                     arrangement.batch_as_rows(c) if (choices.grouped_rows or 1) > 1 else 1),
    )
    tile_ir.verify_tile_kernel(tile, target.max_threads_per_block, target.max_shared_bytes_optin)
    return tile

"""Float32 products on the tensor cores: each operand split into two tf32 pieces, three mma each.

A tensor core multiplies tf32 values (10 mantissa bits) and adds in float32. Writing each
float32 operand as ``big + small``, ``big`` its nearest tf32 and ``small`` what is left
(of which the mma reads the tf32 part), ``a b`` is ``big_a big_b + big_a small_b +
small_a big_b`` to within about 2^-21 of ``a b``. So every multiply-add of the main loop
becomes three ``mma.sync`` m16n8k8 products, the small ones first. The tensor cores
truncate the sums they accumulate, so a reduction run through them drifts toward zero:
with the k-steps' products added into the accumulators on the tensor cores, the suite's
linears came out 10 to 100 times further from a float64 product than cuBLAS's float32
ones (K = 2048 to 18944). Each step's three products are therefore summed from zero on
the tensor cores and added to the accumulators with float32 additions, which round to
nearest; then they came out as close as cuBLAS's or closer.

A warp computes its threads' register tiles as PTX lays out an m16n8k8 accumulator: a
warp is a patch of 8 x 4 threads, thread (g, t) owning rows ``g`` and ``g + 8`` of each
16-row piece and columns ``2t`` and ``2t + 1`` of each 8-column one. In the schedule's
terms the rows of a register tile are single rows ``threads_m`` apart, taken in pairs, and
its columns runs of two ``2 threads_n`` apart: each pair of rows and run of columns of
every thread of the warp is one mma's accumulator. The operands' fragments are read from
the staged k-tiles, whose rows are padded to 8 words past a multiple of 32 so that the
eight rows and four k-steps that a warp reads at once fall in 32 distinct banks.

An infinite operand has no such pieces: its nearest tf32 is infinite and what is left is
inf - inf = NaN, so a product of inf by 1.0 would come out NaN. The big piece is therefore
held within the largest finite tf32 (``big_piece``: two min/max instructions, no register more).
inf splits into that and an infinite small piece, which meets only the other side's big piece,
so inf times a finite nonzero value stays an infinity of the right sign, and a float32 within
2^-12 of the largest, whose nearest tf32 overflows, splits exactly. One case is left: inf times a value
of magnitude 4096 or more whose small piece has the other sign gives NaN (the largest tf32
times that small piece overflows too). ``wgmma`` splits only its n side so (``wgmma.products``
says why).

On the H200 ``mma.sync`` alone runs tf32 at 318 TFLOP/s, a ceiling of 106 for three
products, but the kernels reached about 46, as fast as the FMA kernels and no faster:
Nsight Compute found the warps waiting on fixed-latency results (the mma's chain into each
step's sum, the pieces' arithmetic) and on the fragments' shared-memory reads, not on the
tensor cores. Capping registers for more warps, deeper k-tiles and interleaving the mma of
several accumulators made them no faster. So the cost model uses them only where
``products = mma_sync`` is pinned (``experiments/tensor_cores/`` has the figures).
"""

from __future__ import annotations

import struct

from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.knobs import MMA_SYNC, Choices
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand

NAME = "3xtf32"
MMA_K = 8
PATCH_ROWS, PATCH_COLUMNS = 8, 4
"""The patch of a block's threads (y by x) that a warp is."""
COLUMN_RUN = 2
"""Adjacent columns a thread owns in an mma's accumulator."""
PRODUCTS = 3
ROW_BANK_OFFSET = 8
"""A staged row's length in words, modulo 32, that keeps the fragment reads free of bank conflicts."""
MIN_BLOCK_TILE = 32
"""Block tiles at least this long along each output axis: a staged row of 16, padded to 24
words for the fragment reads, puts the rows that one warp copies on the same banks."""

LARGEST_ROUNDED_DOWN = struct.unpack("<f", struct.pack("<I", 0x7F7FEFFF))[0]
"""The largest float32 whose nearest tf32 is finite (the largest tf32, 0x7f7fe000)."""


def big_piece(value: Expr) -> Expr:
    """The big tf32 piece of float32 ``value``: the nearest tf32 of ``value`` held within
    +-``LARGEST_ROUNDED_DOWN``, so that the small piece, ``value`` minus this, is finite for every
    finite ``value`` and infinite (not NaN) for an infinite one; NaN stays NaN. Clamped before the
    rounding rather than after, the kernels keep their registers: clamped after, the 8 x 8 register
    tiles of ``mma.sync`` took a register more and spilled."""
    bound = LARGEST_ROUNDED_DOWN
    held = ex.op("max", ex.op("min", value, ex.const(bound, dtypes.float32)), ex.const(-bound, dtypes.float32))
    return kernel_ir.Tf32(held)


def factors(c: Contraction) -> tuple[Operand, Operand] | None:
    """The m-side and n-side operands whose float32 product is the summed value, or None where
    the value is anything else."""
    value = c.value
    if not (isinstance(value, ex.Op) and value.op == "mul" and value.dtype == dtypes.float32):
        return None
    by_load = {o.load: o for o in c.operands}
    found = [by_load.get(arg) for arg in value.args]
    if any(o is None or o.load.dtype != dtypes.float32 for o in found):
        return None
    sides = {o.side: o for o in found}
    if set(sides) != {"m", "n"}:
        return None
    return sides["m"], sides["n"]


def padding(row: int) -> int:
    """The fewest elements that bring a staged row of ``row`` float32 elements to a length of 8
    words past a multiple of 32 (or 24, as good), keeping its 16-byte alignment."""
    pad = 0
    while (row + pad) % 32 not in (ROW_BANK_OFFSET, 32 - ROW_BANK_OFFSET):
        pad += 4
    return pad


def problem(c: Contraction, choices: Choices, target: Target) -> str | None:
    """Why ``products = mma_sync`` cannot apply to ``choices``, or None."""
    if choices.products != MMA_SYNC:
        return None
    if target.compute_capability < 80:
        return f"products = mma_sync needs tf32 tensor cores (sm_80 or later); {target.name} is {target.arch}"
    if c.acc_dtype != dtypes.float32 or factors(c) is None:
        return ("products = mma_sync needs a float32 sum of products of one operand along the rows and one along "
                "the columns")
    if min(choices.block_m, choices.block_n) < MIN_BLOCK_TILE:
        return (f"products = mma_sync needs block tiles of at least {MIN_BLOCK_TILE} along each axis, not "
                f"{choices.block_m}x{choices.block_n}: narrower staged rows cannot be padded so that both their "
                "copies and the mma's fragment reads are free of bank conflicts")
    if choices.splits != 1:
        return f"products = mma_sync takes whole k-tiles per warp; in_block_k_splits = {choices.splits} must be 1"
    if choices.block_k % MMA_K:
        return f"products = mma_sync takes k in steps of {MMA_K}; block_k = {choices.block_k} is not a multiple"
    if choices.thread_m % 2 or choices.thread_n % COLUMN_RUN:
        return (f"products = mma_sync gives threads rows in pairs and columns in runs of {COLUMN_RUN}; "
                f"a {choices.thread_m}x{choices.thread_n} register tile has an odd side")
    if choices.threads_m % PATCH_ROWS or choices.threads_n % PATCH_COLUMNS:
        return (f"products = mma_sync makes each warp {PATCH_ROWS} x {PATCH_COLUMNS} threads, which do not tile the "
                f"block's {choices.threads_m} x {choices.threads_n}")
    if choices.warp_columns not in (None, PATCH_COLUMNS):
        return (f"products = mma_sync makes warps {PATCH_COLUMNS} threads wide, not warp_columns = "
                f"{choices.warp_columns}")
    if choices.fragment_width != 1:
        return "products = mma_sync reads the mma's own fragments: fragment_width must be 1"
    if choices.copy_steps:
        return f"copy_steps = {choices.copy_steps} spreads copies over FMA steps; with products = mma_sync pin 0"
    return None


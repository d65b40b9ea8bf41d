"""Float32 products on Hopper's warpgroup mma (``wgmma``), each operand as two tf32 pieces.

``mma.sync`` reads its operands from registers, which each thread must first load from
shared memory and split; on the H200 that kept the tensor cores under half busy, no faster
than FMAs (``mma_sync.products``). ``wgmma`` reads B from shared memory, and A from shared memory
or from the registers of its warpgroup's threads. The schedule stages each 32-deep k-tile of
both operands row by row (K-major, 128 bytes a row) in the 128-byte swizzle the descriptors
name. Once a k-tile has landed, each thread reads its values of A (the m side, the block's
rows: four per eight k, as ``mma.sync`` lays them out) into registers and splits them there:
each float32 becomes its nearest tf32 ("big") and what is left ("small"). B (the n side) is
split in place in shared memory, 16 bytes a thread at a time, its small pieces going to a
second array. A warpgroup (four warps) multiplies its 64 rows of the block by all of the
block's columns, three wgmma m64nNk8 per eight k (small x big, big x small, big x big),
summed from zero over the k-tile on the tensor cores and added to the accumulators in
float32, as the ``mma.sync`` kernels do every eight k: the tensor cores truncate their
sums, and on the suite's linears a k-tile's twelve products drift no further from float64
than cuBLAS's FMAs do.

Both sides' values are split as ``mma_sync.products.big_piece`` says, so that an infinity stays
one, as in eager. On the n side, in shared memory, that costs nothing measurable; on the m
side, split in registers between the k-tile's barrier and its wgmma, the two min/max cost about
a tenth of a float32 linear's time (``experiments/tensor_cores/RESULTS.md``), the price of not
turning an infinity in ``x`` into NaN. NaN itself propagates on both sides.

A from registers keeps shared memory's traffic down: A's split pieces are neither written
back nor read by the tensor cores from there, so a k-tile moves about 40 % fewer bytes
through shared memory in a 128 x 64 block (112 KB against 192, counted). On the H200 it
took 5 to 25 % off every product of the suite. B's split of each k-tile runs while the wgmma
of the k-tile before still run, its small pieces in two halves of their array taken in turn: in
128 x 64 blocks that took another 2.5 to 7 % off the M = 2048 linears and up to 2 % off the
scores' products, and made 128 x 128 blocks, one per SM, the fastest for the linears (87 to
98 TFLOP/s in the suite).

The accumulators of a warpgroup lie in its threads as in ``mma.sync``'s m16n8 tiles, so
the block's threads are the same 8 x 4 warp patches with 2 x (BN / 4) register tiles, and
the usual epilogue stores them. A warp holds rows ``g`` and ``g + 8`` of each 16 of the
wgmma, where the patches give a thread rows ``g`` and ``g + BM / 2`` of the block: the
m-side operand's rows are staged in that order (``staged_row``), so the wgmma's row ``r``
is the block's row ``staged_row(r)``.

A hand-written kernel of this design, with both operands split in shared memory, ran the
suite's M = 2048 linears at 1.39 to 1.77x cuBLAS SGEMM, each closer to float64; every
measurement of this design is in ``experiments/tensor_cores/``.

Sixteen-bit operands (bf16 or fp16, summed in float32) need no pieces: each k-tile is 64 deep
(one swizzled row of 128 bytes), both operands are read by wgmma m64nNk16 from shared memory,
one product per value, straight into the accumulators. This is how a 16-bit product runs on
the tensor cores when the TMA cannot read an operand (``wgmma_tma``): a convolution's
operand gathered from its image (the threads stage it element by element, zeros where the
window overhangs the edge), or rows not 16 bytes apart.
"""

from __future__ import annotations

from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.mma_sync import products as mma_sync
from lamina.plugins.schedules.contraction.knobs import WGMMA, Choices, pins_text
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand
from lamina.plugins.schedules.contraction.settings import WGMMA_16_BIT_PRODUCTS, WGMMA_PRODUCTS
from lamina.plugins.schedules.contraction.wgmma_tma import operands as tma_operands

NAME = WGMMA_PRODUCTS
BLOCK_K = kernel_ir.SWIZZLE_BYTES // 4
"""A k-tile is one swizzled row of float32: 32 deep."""
SIXTEEN_BIT_BLOCK_K = kernel_ir.SWIZZLE_BYTES // 2
"""A k-tile of 16-bit operands is one swizzled row of them: 64 deep."""
BLOCK_MS = (64, 128)
"""One or two warpgroups along the block's rows."""
BLOCK_NS = (64, 128)
"""The wgmma's n: the columns of the block."""
COPY_ELEMENTS = 4
"""Each ``cp.async`` moves one 16-byte chunk of a swizzled row (four float32)."""
SWIZZLE_CHUNKS = 8
"""16-byte chunks of a swizzled row."""
ARCH = 90
"""wgmma is Hopper's alone (sm_90a)."""


def uses(choices: Choices) -> bool:
    return choices.products == WGMMA


def factors(c: Contraction) -> tuple[Operand, Operand] | None:
    """The m-side and n-side operands of a float32 sum of their products, both float32 or both
    of one 16-bit type (each perhaps zero where a condition fails: ``masks``), or None."""
    if c.acc_dtype != dtypes.float32:
        return None
    found = mma_sync.factors(c)
    if found is None and (masked := _masked_factors(c)) is not None:
        found = (masked[0][0], masked[1][0])
    return found


def masks(c: Contraction) -> dict[str, ex.Expr]:
    """Each 16-bit operand's condition, by its text, where the product reads it as zero unless
    the condition holds (a convolution's window past the image's edge: ``where(inside, x, 0)``);
    the threads stage zeros there."""
    masked = _masked_factors(c) if c.acc_dtype == dtypes.float32 else None
    return {o.text: mask for o, mask in masked or () if mask is not None}


def _masked_factors(c: Contraction) -> tuple[tuple[Operand, ex.Expr | None], ...] | None:
    """The 16-bit operands of the product on the m and n sides, each with the condition outside
    which it is read as zero (or None); the condition may name only the batch variables, its
    side's variable and the reduction's."""
    value = c.value
    if not (isinstance(value, ex.Op) and value.op == "mul" and value.dtype == dtypes.float32
            and len(value.args) == 2):
        return None
    by_load = {o.load: o for o in c.operands}
    found = [_masked(arg, by_load) for arg in value.args]
    if any(f is None for f in found):
        return None
    kinds = {o.load.dtype for o, _ in found}
    if len(kinds) != 1 or kinds.pop() not in tma_operands.OPERAND_DTYPES:
        return None
    sides = {o.side: (o, mask) for o, mask in found}
    if set(sides) != {"m", "n"}:
        return None
    for side, (_, mask) in sides.items():
        allowed = {*c.batch, c.m if side == "m" else c.n, c.reduce_var}
        if mask is not None and not ex.free_vars(mask) <= allowed:
            return None
    return sides["m"], sides["n"]


def _masked(value: ex.Expr, by_load: dict) -> tuple[Operand, ex.Expr | None] | None:
    """The operand ``value`` reads, under widening casts and ``where(mask, x, 0)`` (perhaps
    rounded back to ``x``'s own dtype, which changes nothing: ``bf16(where(m, f32(x), 0))``),
    and the mask."""
    value = tma_operands.unwrapped(value)
    if isinstance(value, ex.Op) and value.op == "cast" and isinstance(value.args[0], ex.Op) \
            and value.args[0].op == "where":
        narrow, value = value.dtype, value.args[0]
        if tma_operands.unwrapped(value.args[1]).dtype != narrow:
            return None
    mask = None
    if isinstance(value, ex.Op) and value.op == "where" and _is_zero(value.args[2]):
        mask, value = value.args[0], tma_operands.unwrapped(value.args[1])
    operand = by_load.get(value)
    return None if operand is None else (operand, mask)


def _is_zero(value: ex.Expr) -> bool:
    return isinstance(value, ex.Const) and value.value == 0


def sixteen_bit(c: Contraction) -> bool:
    """Whether the products take 16-bit operands, one wgmma per value (else split tf32)."""
    found = factors(c)
    return found is not None and found[0].load.dtype.itemsize == 2


def block_k(c: Contraction) -> int:
    return SIXTEEN_BIT_BLOCK_K if sixteen_bit(c) else BLOCK_K


def products_name(c: Contraction) -> str:
    return WGMMA_16_BIT_PRODUCTS if sixteen_bit(c) else NAME


def choices_for(block_m: int, block_n: int, buffers: int, depth: int = BLOCK_K) -> Choices:
    """The one setting of the other knobs that a wgmma block of ``block_m`` x ``block_n`` takes,
    its k-tiles ``depth`` deep."""
    return Choices(block_m, block_n, depth, 2, block_n // mma_sync.PATCH_COLUMNS, 1, buffers, 0, 1,
                   mma_sync.PATCH_COLUMNS, None, 0, WGMMA)


def staged_row(row: ex.Expr, block_m: int) -> ex.Expr:
    """The block row that the m-side operand's staged row ``row`` holds: wgmma row
    ``16 w + 8 h + g`` is warp ``w``'s thread row ``8 w + g``, its ``h``-th register row,
    which the warp patches place ``block_m / 2`` rows further on."""
    return row // 16 * 8 + row % 8 + row // 8 % 2 * (block_m // 2)


def staged_position(side: str, staged: ex.Expr, block_m: int) -> ex.Expr:
    """The block row that the m side's staged row ``staged`` holds (``staged_row``); on the n
    side, the same column."""
    return staged_row(staged, block_m) if side == "m" else staged


def problem(c: Contraction, choices: Choices, target: Target) -> str | None:
    """Why ``products = wgmma`` cannot apply to ``choices``, or None."""
    if target.compute_capability != ARCH:
        return f"products = wgmma needs Hopper's wgmma (sm_90); {target.name} is {target.arch}"
    if factors(c) is None:
        return ("products = wgmma needs a float32 sum of products of one operand along the rows and one along "
                "the columns, both float32 or both of one 16-bit type")
    expected = choices_for(choices.block_m, choices.block_n, choices.buffers, block_k(c))
    if choices.block_m not in BLOCK_MS or choices.block_n not in BLOCK_NS:
        return (f"products = wgmma takes blocks of {' or '.join(map(str, BLOCK_MS))} rows by "
                f"{' or '.join(map(str, BLOCK_NS))} columns, not {choices.block_m}x{choices.block_n}")
    differing = [name for name in ("block_k", "thread_m", "thread_n", "splits", "padding", "fragment_width",
                                   "warp_columns", "copy_steps")
                 if getattr(choices, name) not in (getattr(expected, name), None)]
    if differing:
        wanted = pins_text({name: getattr(expected, name) for name in differing}, " = ")
        return f"products = wgmma in {choices.block_m}x{choices.block_n} blocks takes {wanted}"
    if choices.buffers < 2:
        return "products = wgmma copies the next k-tile while the wgmma run: buffers must be 2 or 3"
    return None


def unaligned_operand(c: Contraction, operand: Operand) -> str:
    """Why ``operand``, not read in aligned 16-byte runs along the reduction, cannot be staged."""
    return (f"products = wgmma copies {operand.text} in 16-byte runs along {c.reduce_var}: it must be contiguous "
            f"along {c.reduce_var}, with {c.reduce_var}'s extent and every other stride a multiple of "
            f"{COPY_ELEMENTS} (tf32 wgmma reads its operands K-major and cannot transpose them)")


def shared_bytes(c: Contraction, choices: Choices) -> int:
    """The staged k-tiles of both operands (``buffers`` of them), and for float32 two k-tiles of
    the n side's small pieces."""
    row = kernel_ir.SWIZZLE_BYTES
    small_pieces = 0 if sixteen_bit(c) else 2 * choices.block_n * row
    return choices.buffers * (choices.block_m + choices.block_n) * row + small_pieces

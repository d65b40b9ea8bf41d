"""Kernel IR's nodes that only Hopper (sm_90) runs.

``ClusterLoad`` reads the shared memory of another block of the same cluster (blocks
launched together along x), after a ``ClusterBarrier``. Hopper's warpgroup mma,
``Wgmma`` (tf32, bf16 or fp16 operands; ``WgmmaTf32`` is its tf32 name), reads its operands
from shared arrays laid out in the 128-byte swizzle (``Array.swizzle``), or A from registers
(``a_from``), and runs asynchronously between
``WgmmaFence``, ``WgmmaCommit`` and ``WgmmaWait``. A kernel whose launch overlaps the previous
kernel's (``Launch.overlaps_previous_kernel``, programmatic dependent launch) starts with
``WaitForPreviousKernel``, after at most ``LetNextKernelLaunch``. The mbarriers are in
``hopper_barriers``, the tensor memory accelerator's copies in ``hopper_tma``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from lamina.core.ir import dtypes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr

if TYPE_CHECKING:
    from lamina.core.ir.kernel_ir.nodes import Array


# --- clusters ----------------------------------------------------------------

MAX_PORTABLE_CLUSTER_BLOCKS = 8
"""The largest cluster every Hopper GPU can launch."""
MAX_CLUSTER_BLOCKS = 16
"""The largest cluster Hopper launches where the kernel allows a non-portable size (the CUDA
backend allows it for clusters past ``MAX_PORTABLE_CLUSTER_BLOCKS``); whether every SM can
then take a cluster depends on the GPU and on the blocks' registers and shared memory."""


@attrs.frozen(eq=True)
class ClusterLoad(Expr):
    """``array[index]`` in the shared memory of block ``rank`` of this block's cluster.

    A cluster is ``Launch.cluster[0]`` consecutive blocks along x, resident at once;
    ``rank`` counts them from 0. The value must have been stored before a
    ``ClusterBarrier`` that both blocks passed, and the owner must not store to it again
    (nor finish) before another ``ClusterBarrier``: that is how the blocks of a cluster
    combine partial results without a round trip through global memory.
    """

    array: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    rank: Expr
    dtype: DType

    def children(self):
        return self.index + (self.rank,)

    def rebuild(self, children):
        return attrs.evolve(self, index=tuple(children[:-1]), rank=children[-1])


@attrs.frozen
class ClusterBarrier:
    """All threads of every block of the cluster wait here; shared-memory stores before it
    are visible to ``ClusterLoad`` of the cluster's blocks after it."""


# --- the warpgroup mma's swizzle ---------------------------------------------

SWIZZLE_BYTES = 128
"""The one swizzle Kernel IR knows: rows of 128 bytes in 16-byte chunks, over 8 rows."""
SWIZZLE_ALIGNMENT = 1024
"""A swizzled array starts on a boundary of its 8-row pattern, as the hardware's XOR reads
the address bits."""


def swizzled_offset(array: Array, element: int) -> int:
    """Where element ``element`` (row-major, logical) of swizzled ``array`` is stored."""
    byte = element * array.dtype.itemsize
    row = byte // SWIZZLE_BYTES
    chunk = (byte // 16) % (SWIZZLE_BYTES // 16)
    moved = row * SWIZZLE_BYTES + (chunk ^ (row % 8)) * 16 + byte % 16
    return moved // array.dtype.itemsize


# --- the warpgroup mma -------------------------------------------------------

WGMMA_M, WGMMA_K = 64, 8
"""The rows of a wgmma, and its k for tf32 operands."""
WARPGROUP_SIZE = 128
WGMMA_A_SOURCES = ("shared", "registers")
"""Where a ``Wgmma`` reads operand A from."""
REGISTER_VALUES = 4
"""The 32-bit values of A each thread gives a ``Wgmma`` that reads A from registers."""
WGMMA_OPERAND_DTYPES = (dtypes.float32, dtypes.bfloat16, dtypes.float16)
"""The operand types of ``Wgmma``: float32 (read as tf32), bfloat16 and float16."""
K_MAJOR, N_MAJOR = "k_major", "n_major"
WGMMA_B_LAYOUTS = (K_MAJOR, N_MAJOR)
"""How a ``Wgmma`` finds B in shared memory: its rows along n (K-major), or its rows along k (N-major)."""
SWIZZLE_PANEL = 64
"""Columns of a 16-bit N-major operand in one 128-byte swizzled row: the width of its panels."""


def wgmma_k(operand_dtype: DType) -> int:
    """The k of one wgmma: 32 bytes of a row of each operand, 8 tf32 or 16 bf16 / fp16 elements."""
    return 32 // operand_dtype.itemsize


def register_dtype(operand_dtype: DType) -> DType:
    """The type of the register arrays that hold A of a ``Wgmma`` on ``operand_dtype`` that reads A
    from registers: float32 for tf32, int32 words of two 16-bit elements (``PackedPair``) else."""
    return dtypes.float32 if operand_dtype == dtypes.float32 else dtypes.int32


def _array_or_values(a):
    """A shared array's name stays a name; the values of A from registers become a tuple."""
    return a if isinstance(a, str) else tuple(a)


@attrs.frozen
class Wgmma:
    """One warpgroup-wide asynchronous tensor-core product, PTX's ``wgmma.mma_async`` m64nNk8
    with tf32 operands: ``D[64][n] += A[64][8] @ B[n][8]^T`` in float32, or ``D = A @ B^T``
    without ``accumulate``; with ``operand_dtype`` bfloat16 or float16, m64nNk16 on operands
    of that type (``.f32.bf16.bf16``, ``.f32.f16.f16``; PTX ISA, "Asynchronous Warpgroup Level
    Matrix Multiply-Accumulate Instructions"), k being 16 where these words say 8 (``wgmma_k``).

    B is ``n`` rows from row ``r`` and columns ``k .. k + 7`` of the last two axes of shared
    array ``b``, where ``b_index`` = (leading indices..., r, k). With ``b_layout`` ``n_major``
    (16-bit operands only; PTX's transposed B, ``imm-trans-b`` 1) B is stored along n instead,
    as it lies in a row-major ``x @ W`` weight or in attention's values: ``b`` has panels of
    ``SWIZZLE_PANEL`` columns of n, each a run of 128-byte rows, one per k, and ``b_index`` =
    (leading indices..., p, k, 0) means ``B[j][kk]`` = ``b[..., p + j // 64, k + kk, j % 64]``
    (``k`` a multiple of 8). A is read from where ``a_from`` says:

    - ``"shared"``: rows ``r .. r + 63`` of shared array ``a`` from ``a_index``, as B.
      Both arrays are of ``operand_dtype`` and swizzled (``Array.swizzle``), with rows of
      128 bytes (K-major, as a ``TmaLoad`` with the 128-byte swizzle writes them); ``r`` is a
      multiple of 8 and ``k`` of the wgmma's k.
    - ``"registers"`` (PTX's register-sourced form): ``a`` is the four 32-bit values each
      thread gives, and ``a_index`` is empty. Lane ``4 g + t`` of warp ``w`` of the warpgroup
      gives ``A[16 w + g][t]``, ``A[16 w + g + 8][t]``, ``A[16 w + g][t + 4]`` and
      ``A[16 w + g + 8][t + 4]``, as in ``MmaTf32``, each an element of an f32 register array;
      with 16-bit operands, where k is twice as long, each value is an element of an int32
      register array holding two of A's elements side by side (``PackedPair``), columns
      ``2 t, 2 t + 1`` and ``2 t + 8, 2 t + 9``: where a wgmma's accumulators hold ``D[..][16 c ..]``
      in elements ``8 c .. 8 c + 7``, so that one product's results packed in order
      (attention's probabilities) are the next one's A. A's registers are under the
      accumulators' rules: written before a ``WgmmaFence``, and left alone until a
      ``WgmmaWait`` covers the wgmma.

    The tensor cores read the tf32 part of each float32 value. Lane ``4 g + t`` of warp ``w`` of the
    warpgroup holds ``D[16 w + g + 8 h][8 j + 2 t + e]`` in element ``acc_index[4 j + 2 h + e]``
    of its f32 register array ``acc``.

    The 128 threads of a warpgroup (``threadIdx`` flattened, 128 apart) run it together,
    with the same operands. It runs asynchronously: it may start only after a
    ``WgmmaFence`` that follows every other access to its accumulators, shared memory that
    ordinary stores or ``cp.async`` wrote is visible to it only after an ``AsyncProxyFence``
    by the writing thread (and a barrier), and its accumulators may be read, and its operands
    overwritten, only after a ``WgmmaWait`` that covers the ``WgmmaCommit`` group it is in.
    """

    acc: str
    acc_index: tuple[tuple[Expr, ...], ...] = attrs.field(converter=lambda v: tuple(tuple(i) for i in v))
    a: str | tuple[Expr, ...] = attrs.field(converter=_array_or_values)
    a_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    b: str
    b_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    n: int
    accumulate: bool = True
    a_from: str = "shared"
    operand_dtype: DType = dtypes.float32
    b_layout: str = K_MAJOR

    @property
    def k(self) -> int:
        return wgmma_k(self.operand_dtype)


WgmmaTf32 = Wgmma
"""The name of ``Wgmma`` from when it took tf32 operands only; it still builds that one."""


@attrs.frozen
class WgmmaFence:
    """Order the warpgroup's earlier accesses to accumulator registers before the wgmma that follow."""


@attrs.frozen
class WgmmaCommit:
    """Close the current group of the warpgroup's wgmma."""


@attrs.frozen
class WgmmaWait:
    """Wait until at most ``pending`` groups of the warpgroup's wgmma are still running."""

    pending: int = 0


@attrs.frozen
class AsyncProxyFence:
    """Make this thread's earlier writes to shared memory visible to the asynchronous proxy that
    ``Wgmma`` reads through (``fence.proxy.async.shared::cta``)."""


# --- overlapping launches ----------------------------------------------------

OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY = 90
"""The first GPUs whose kernels can overlap the previous kernel's launch (Hopper, sm_90)."""


@attrs.frozen
class LetNextKernelLaunch:
    """Let the kernel after this one on the stream launch before this one finishes
    (``griddepcontrol.launch_dependents``), once every block of this one has run this."""


@attrs.frozen
class WaitForPreviousKernel:
    """Wait until the kernel before this one on the stream has finished and its stores are
    visible (``griddepcontrol.wait``). A kernel whose launch overlaps the previous kernel's
    runs this before anything that touches global memory."""

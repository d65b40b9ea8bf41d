"""Kernel IR's nodes: the CUDA program as data.

A ``Kernel`` has pointer parameters (one per buffer, flat, row-major), shared arrays
with their padded shapes, a body of statements, and its launch configuration. Its
expressions are those of ``lamina.core.ir.expr`` plus ``Load`` from an array, the
thread and block indices, warp shuffles, and ``Tf32`` rounding for the warp-wide
tensor-core statement ``MmaTf32``. Arrays live in one of three spaces: ``global`` (the
parameters), ``shared`` and ``register`` (per-thread arrays, indexed only by constants
after unrolling). The nodes that only Hopper runs are in ``hopper``, ``hopper_barriers`` and
``hopper_tma``; ``Stmt`` names them all.

Loop bounds must be the same for every thread of the grid; anything that varies per
thread is an ``If``. That is how the schedules are written, and it lets the CPU
simulator run a whole grid in lockstep.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.core.ir.kernel_ir.hopper import (
    SWIZZLE_ALIGNMENT,
    AsyncProxyFence,
    ClusterBarrier,
    LetNextKernelLaunch,
    WaitForPreviousKernel,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from lamina.core.ir.kernel_ir.hopper_barriers import MbarrierArrive, MbarrierInit, MbarrierWait
from lamina.core.ir.kernel_ir.hopper_tma import TensorMap, TmaLoad, TmaStore, TmaStoreCommit, TmaStoreWait

SPACES = ("global", "shared", "register")
SPECIALS = ("threadIdx", "blockIdx")


@attrs.frozen(eq=True)
class Special(Expr):
    """``threadIdx.x``, ``blockIdx.y`` ..."""

    kind: str
    axis: str
    dtype: DType = dtypes.index


@attrs.frozen(eq=True)
class Load(Expr):
    array: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    dtype: DType

    def children(self):
        return self.index

    def rebuild(self, children):
        return attrs.evolve(self, index=tuple(children))


WARP_SIZE = 32


@attrs.frozen(eq=True)
class ShuffleXor(Expr):
    """``value`` as computed by lane ``lane ^ lane_mask`` of the same warp.

    Every lane of the warp must evaluate it together (never under a branch that only
    part of the warp takes): it is how partial results of a warp are combined.
    """

    value: Expr
    lane_mask: int

    @property
    def dtype(self) -> DType:
        return self.value.dtype

    def children(self):
        return (self.value,)

    def rebuild(self, children):
        return attrs.evolve(self, value=children[0])


@attrs.frozen(eq=True)
class Tf32(Expr):
    """The float32 ``value`` rounded to the nearest tf32 (10 mantissa bits, ties away from
    zero), still a float32: half the weight of the 13 dropped bits is added to the bits,
    then they are cleared. Infinities and NaNs stay what they are, except a NaN whose
    payload lies wholly in the dropped bits, which becomes an infinity."""

    value: Expr

    @property
    def dtype(self) -> DType:
        return dtypes.float32

    def children(self):
        return (self.value,)

    def rebuild(self, children):
        return attrs.evolve(self, value=children[0])


@attrs.frozen(eq=True)
class PackedPair(Expr):
    """Two float32 values rounded to the 16-bit ``pair_dtype`` (bfloat16 or float16, to nearest
    even) and packed into one 32-bit word, ``low`` in its low half (PTX's
    ``cvt.rn.bf16x2.f32``): how a thread holds A of a 16-bit ``Wgmma`` in registers."""

    low: Expr
    high: Expr
    pair_dtype: DType

    @property
    def dtype(self) -> DType:
        return dtypes.int32

    def children(self):
        return (self.low, self.high)

    def rebuild(self, children):
        return attrs.evolve(self, low=children[0], high=children[1])


def thread_idx(axis: str = "x") -> Special:
    return Special("threadIdx", axis)


def block_idx(axis: str = "x") -> Special:
    return Special("blockIdx", axis)


@attrs.frozen
class Param:
    """A pointer parameter: buffer ``name`` as a flat array of ``numel`` elements.

    A ``scratch`` parameter is no buffer of the program: the kernel's own working memory
    (counters that its blocks share), which the program's runner allocates, zeroed, for each
    launch; not ``zeroed`` where the kernel writes each element before any block reads it (a
    block's partial results), which spares the launch a memset.
    """

    name: str
    dtype: DType
    numel: "int | Expr"
    writable: bool = False
    scratch: bool = False
    zeroed: bool = True


@attrs.frozen
class Array:
    """A shared or register array. ``shape`` includes padding; ``space`` is shared or register.

    A shared array with ``swizzle = 128`` is stored as Hopper's ``wgmma`` reads its operands
    in the 128-byte swizzle: in rows of 128 bytes (its last axis), each row's 16-byte chunk
    ``c`` at chunk ``c XOR (row mod 8)``, counting rows over the whole array, which starts
    1024-byte aligned. Its indices stay logical: only the backends place the elements
    (``swizzled_offset``), so the copies into it and the reads from it are written as for
    any array.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=tuple)
    space: str
    swizzle: int = 0

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def alignment(self) -> int:
        """The bytes its start must be aligned to in shared memory."""
        return SWIZZLE_ALIGNMENT if self.swizzle else 16


# --- statements --------------------------------------------------------------

@attrs.frozen
class Declare:
    """A per-thread scalar ``var`` of ``dtype``, optionally initialised."""

    var: str
    dtype: DType
    init: Expr | None = None


@attrs.frozen
class Assign:
    var: str
    value: Expr


@attrs.frozen
class Store:
    array: str
    index: tuple[Expr, ...] = attrs.field(converter=tuple)
    value: Expr


@attrs.frozen
class For:
    """``for var in range(start, stop, step)``; bounds are the same in every thread."""

    var: str
    start: Expr
    stop: Expr
    step: int
    body: tuple["Stmt", ...] = attrs.field(converter=tuple)
    unroll: bool = False


@attrs.frozen
class If:
    cond: Expr
    then: tuple["Stmt", ...] = attrs.field(converter=tuple)
    orelse: tuple["Stmt", ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class Divergent:
    """``body``, run by each group of the threads that share a value of ``group`` (0 to ``count - 1``)
    at its own pace: two warpgroups taking turns on mbarriers, say. CUDA runs it as written, once
    (``group`` being an expression of the thread's index, each thread its own); the simulator, which
    runs a block's threads in lockstep, runs each group as a task of its own where the body waits on
    mbarriers, so that the groups may wait for each other. The alternative, an ``If`` with a branch
    per group, prints the body once per group."""

    group: Expr
    count: int
    body: tuple["Stmt", ...] = attrs.field(converter=tuple)


@attrs.frozen
class Barrier:
    """All threads of the block wait here; shared-memory writes before it are visible after it."""


@attrs.frozen
class CpAsync:
    """Asynchronous copy of one element (``bytes`` wide) from global to shared memory.

    Where ``predicate`` is false the destination is filled with zeros and the source is
    not read. The data may be read only after a ``CpAsyncWait`` that covers its group
    and a ``Barrier``.
    """

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    src: str
    src_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    bytes: int = 4
    predicate: Expr | None = None


@attrs.frozen
class CpAsyncCommit:
    """Close the current group of asynchronous copies."""


@attrs.frozen
class CpAsyncWait:
    """Wait until at most ``pending`` groups of this thread's copies are still in flight."""

    pending: int = 0


VECTOR_BYTES = (2, 4, 8, 16)
"""The sizes of one vector access: what a single load or store instruction moves."""


@attrs.frozen
class VectorLoad:
    """Copy ``width`` adjacent elements of global parameter or shared array ``src``, from
    element ``src_index``, into register array ``dst`` from ``dst_index`` on, in one access.

    Both sides must be aligned to the access's size (``width`` elements): the GPU
    faults on a misaligned vector access. A shared array starts aligned to 16 bytes, so
    a vector read of it is aligned where its offset in the array is.

    ``cache = "l2"`` reads a global parameter through L2 alone (``ld.global.cg``), not the
    SM's L1, which does not see what other SMs wrote during the kernel.
    """

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    src: str
    src_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    width: int
    cache: str = "default"


@attrs.frozen
class VectorStore:
    """Copy ``width`` adjacent elements of register array ``src`` into global parameter or
    shared array ``dst`` from element ``dst_index`` on, in one access aligned like a ``VectorLoad``.

    ``cache = "evict_first"`` marks a store to a global parameter as streaming
    (``st.global.cs``): L2 lets its lines go first, keeping room for data still to be read.
    """

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    src: str
    src_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    width: int
    cache: str = "default"


LOAD_CACHE_HINTS = ("default", "l2")
STORE_CACHE_HINTS = ("default", "evict_first")


@attrs.frozen
class Comment:
    text: str


@attrs.frozen
class MmaTf32:
    """One warp-wide tensor-core multiply-add, PTX's ``mma.sync`` m16n8k8 with tf32 operands:
    ``D[16][8] += A[16][8] @ B[8][8]`` in float32, each lane holding pieces of A, B and D.

    Lane ``4 g + t`` of the warp supplies ``a`` = A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]
    and ``b`` = B[t][g], B[t+4][g], and accumulates into the elements ``acc_index`` of its
    register array ``acc`` holding D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]. Operands
    are float32 values of which the tensor cores read the tf32 part (``Tf32`` rounds them).
    Every lane of the warp runs it together, never under a branch that only part of the warp
    takes.
    """

    acc: str
    acc_index: tuple[tuple[Expr, ...], ...] = attrs.field(converter=lambda v: tuple(tuple(i) for i in v))
    a: tuple[Expr, ...] = attrs.field(converter=tuple)
    b: tuple[Expr, ...] = attrs.field(converter=tuple)


@attrs.frozen
class Mma16:
    """One warp-wide tensor-core multiply-add of 16-bit operands, PTX's ``mma.sync`` m16n8k16:
    ``D[16][8] += A[16][16] @ B[16][8]``, products exact and summed in float32.

    Each operand is a 32-bit word of two ``operand_dtype`` values (bfloat16 or float16), the
    lower index in its low half (``PackedPair``). Lane ``4 g + t`` of the warp supplies ``a`` =
    A[g][2t..2t+1], A[g+8][2t..2t+1], A[g][2t+8..2t+9], A[g+8][2t+8..2t+9] and ``b`` =
    B[2t..2t+1][g], B[2t+8..2t+9][g], and accumulates into the elements ``acc_index`` of its
    register array ``acc`` holding D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]. Every lane of
    the warp runs it together, never under a branch that only part of the warp takes.
    """

    acc: str
    acc_index: tuple[tuple[Expr, ...], ...] = attrs.field(converter=lambda v: tuple(tuple(i) for i in v))
    a: tuple[Expr, ...] = attrs.field(converter=tuple)
    b: tuple[Expr, ...] = attrs.field(converter=tuple)
    operand_dtype: DType = dtypes.bfloat16


@attrs.frozen
class ThreadFence:
    """Order this thread's global memory accesses for every thread of the grid (``__threadfence``):
    a block that sees a later write of this thread (an ``AtomicAdd``) also sees the earlier ones."""


@attrs.frozen
class AtomicAdd:
    """Add ``value`` to element ``index`` of global parameter ``array`` in one atomic step,
    the element's value before it going to register array ``dst`` at ``dst_index``."""

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    array: str
    index: Expr
    value: Expr


Stmt = (Declare | Assign | Store | For | If | Divergent | Barrier | ClusterBarrier | CpAsync | CpAsyncCommit
        | CpAsyncWait | VectorLoad | VectorStore | MmaTf32 | Mma16 | Wgmma | WgmmaFence | WgmmaCommit | WgmmaWait
        | AsyncProxyFence | ThreadFence | AtomicAdd | LetNextKernelLaunch | WaitForPreviousKernel
        | MbarrierInit | MbarrierArrive | MbarrierWait | TmaLoad | TmaStore | TmaStoreCommit | TmaStoreWait
        | Comment)


@attrs.frozen
class Launch:
    """Blocks of ``block`` threads in a ``grid``; ``cluster`` blocks along x run at once as a
    cluster, (1, 1, 1) where the blocks are independent. With ``overlaps_previous_kernel``, the
    kernel may launch while the kernel before it on the stream still runs, and waits for it
    (``WaitForPreviousKernel``) before touching memory: its launch and the start of its blocks
    are hidden behind the other kernel's last blocks."""

    grid: tuple["int | Expr", "int | Expr", "int | Expr"] = attrs.field(converter=tuple)
    block: tuple[int, int, int] = attrs.field(converter=tuple)
    dynamic_shared_bytes: int = 0
    cluster: tuple[int, int, int] = attrs.field(converter=tuple, default=(1, 1, 1))
    overlaps_previous_kernel: bool = False

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


@attrs.frozen(cache_hash=True)
class Kernel:
    """A kernel: its pointer parameters, its shared and register arrays, its body and launch,
    and the tensor maps (``TensorMap``) its TMA copies read through, passed after the pointers.
    Its hash is kept once computed: the backend finds the kernels a model repeats by it."""

    name: str
    params: tuple[Param, ...] = attrs.field(converter=tuple)
    arrays: tuple[Array, ...] = attrs.field(converter=tuple)
    body: tuple[Stmt, ...] = attrs.field(converter=tuple)
    launch: Launch
    tensor_maps: tuple[TensorMap, ...] = attrs.field(converter=tuple, default=())
    sizes: tuple[str, ...] = attrs.field(converter=tuple, default=())
    """The sizes known only at run time (``s0``, ``lamina.core.ir.sizes``) that the kernel reads as
    variables of those names: passed by value after the pointers, and the launch's grid and the
    parameters' element counts may be expressions of them."""

    def array(self, name: str) -> Param | Array:
        for a in self.params + self.arrays:
            if a.name == name:
                return a
        raise KeyError(name)

    def tensor_map(self, name: str) -> TensorMap:
        for m in self.tensor_maps:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def shared_bytes(self) -> int:
        return sum(a.bytes for a in self.arrays if a.space == "shared")


@attrs.frozen
class Program:
    """Kernel IR kernels in launch order; parameter names are the Loop IR buffer names."""

    kernels: tuple[Kernel, ...] = attrs.field(converter=tuple)
    repeats: tuple[tuple[str, str], ...] = attrs.field(converter=tuple, default=())
    """(kernel, earlier kernel) for each kernel that is an earlier one with its arrays renamed
    (``rename_arrays``, a model's next layer): the same code, which a backend compiles once
    without comparing the two (``lower_to_kernels`` records them)."""

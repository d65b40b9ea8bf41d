"""Kernel IR: the CUDA program as data.

A ``Kernel`` has pointer parameters (one per buffer, flat, row-major), shared arrays
with their padded shapes, a body of statements, and its launch configuration. Its
expressions are those of ``lamina.core.ir.expr`` plus ``Load`` from an array, the
thread and block indices, warp shuffles, ``ClusterLoad`` from the shared memory of
another block of the same cluster (blocks launched together along x, as on Hopper), and
``Tf32`` rounding for the warp-wide tensor-core statement ``MmaTf32``. Hopper's
warpgroup mma, ``WgmmaTf32``, reads its operands from shared arrays laid out in the
128-byte swizzle (``Array.swizzle``), or A from registers (``WgmmaTf32RegisterA``), and runs
asynchronously between ``WgmmaFence``, ``WgmmaCommit`` and ``WgmmaWait``.
A kernel whose launch overlaps the previous kernel's (``Launch.overlaps_previous_kernel``,
Hopper's programmatic dependent launch) starts with ``WaitForPreviousKernel``, after at most
``LetNextKernelLaunch``. Arrays live in one of three spaces: ``global`` (the parameters),
``shared`` and ``register`` (per-thread arrays, indexed only by constants after unrolling).

Loop bounds must be the same for every thread of the grid; anything that varies per
thread is an ``If``. That is how the schedules are written, and it lets the CPU
simulator run a whole grid in lockstep.
"""

from __future__ import annotations

import math
from typing import Iterator

import attrs

from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr

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
MAX_PORTABLE_CLUSTER_BLOCKS = 8
"""The largest cluster every Hopper GPU can launch."""
MAX_CLUSTER_BLOCKS = 16
"""The largest cluster Hopper launches where the kernel allows a non-portable size (the CUDA
backend allows it for clusters past ``MAX_PORTABLE_CLUSTER_BLOCKS``); whether every SM can
then take a cluster depends on the GPU and on the blocks' registers and shared memory."""


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


def thread_idx(axis: str = "x") -> Special:
    return Special("threadIdx", axis)


def block_idx(axis: str = "x") -> Special:
    return Special("blockIdx", axis)


@attrs.frozen
class Param:
    """A pointer parameter: buffer ``name`` as a flat array of ``numel`` elements.

    A ``scratch`` parameter is no buffer of the program: the kernel's own working memory
    (counters that its blocks share), which the program's runner allocates, zeroed, for each
    launch.
    """

    name: str
    dtype: DType
    numel: int
    writable: bool = False
    scratch: bool = False


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
class Barrier:
    """All threads of the block wait here; shared-memory writes before it are visible after it."""


@attrs.frozen
class ClusterBarrier:
    """All threads of every block of the cluster wait here; shared-memory stores before it
    are visible to ``ClusterLoad`` of the cluster's blocks after it."""


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


WGMMA_M, WGMMA_K = 64, 8
WARPGROUP_SIZE = 128


@attrs.frozen
class WgmmaTf32:
    """One warpgroup-wide asynchronous tensor-core product, PTX's ``wgmma.mma_async`` m64nNk8
    with tf32 operands read from shared memory: ``D[64][n] += A[64][8] @ B[n][8]^T`` in
    float32, or ``D = A @ B^T`` without ``accumulate``.

    A is rows ``r .. r + 63`` and columns ``k .. k + 7`` of the last two axes of shared array
    ``a``, where ``a_index`` = (leading indices..., r, k); B is ``n`` rows of ``b`` from
    ``b_index`` likewise. Both arrays are float32 and swizzled (``Array.swizzle``), with rows of
    32 elements; ``r`` is a multiple of 8 and ``k`` of 8. The tensor cores read the tf32 part
    of each value. Lane ``4 g + t`` of warp ``w`` of the warpgroup holds
    ``D[16 w + g + 8 h][8 j + 2 t + e]`` in element ``acc_index[4 j + 2 h + e]`` of its f32
    register array ``acc``.

    The 128 threads of a warpgroup (``threadIdx`` flattened, 128 apart) run it together,
    with the same operands. It runs asynchronously: it may start only after a
    ``WgmmaFence`` that follows every other access to its accumulators, shared memory that
    ordinary stores or ``cp.async`` wrote is visible to it only after an ``AsyncProxyFence``
    by the writing thread (and a barrier), and its accumulators may be read, and its operands
    overwritten, only after a ``WgmmaWait`` that covers the ``WgmmaCommit`` group it is in.
    """

    acc: str
    acc_index: tuple[tuple[Expr, ...], ...] = attrs.field(converter=lambda v: tuple(tuple(i) for i in v))
    a: str
    a_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    b: str
    b_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    n: int
    accumulate: bool = True


@attrs.frozen
class WgmmaTf32RegisterA:
    """``WgmmaTf32`` with A from registers (PTX's register-sourced form): each thread gives its
    part of A as four f32 values ``a``, each read from an f32 register array, which the tensor
    cores read the tf32 part of. Lane ``4 g + t`` of warp ``w`` of the warpgroup gives
    ``A[16 w + g][t]``, ``A[16 w + g + 8][t]``, ``A[16 w + g][t + 4]`` and
    ``A[16 w + g + 8][t + 4]``, as in ``MmaTf32``. B, the accumulators and the asynchronous
    protocol are ``WgmmaTf32``'s, and A's registers are under the accumulators' rules: written
    before a ``WgmmaFence``, and left alone until a ``WgmmaWait`` covers the wgmma.
    """

    acc: str
    acc_index: tuple[tuple[Expr, ...], ...] = attrs.field(converter=lambda v: tuple(tuple(i) for i in v))
    a: tuple[Expr, ...] = attrs.field(converter=tuple)
    b: str
    b_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    n: int
    accumulate: bool = True


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


@attrs.frozen
class LetNextKernelLaunch:
    """Let the kernel after this one on the stream launch before this one finishes
    (``griddepcontrol.launch_dependents``), once every block of this one has run this."""


@attrs.frozen
class WaitForPreviousKernel:
    """Wait until the kernel before this one on the stream has finished and its stores are
    visible (``griddepcontrol.wait``). A kernel whose launch overlaps the previous kernel's
    runs this before anything that touches global memory."""


@attrs.frozen
class AsyncProxyFence:
    """Make this thread's earlier writes to shared memory visible to the asynchronous proxy that
    ``WgmmaTf32`` reads through (``fence.proxy.async.shared::cta``)."""


Stmt = (Declare | Assign | Store | For | If | Barrier | ClusterBarrier | CpAsync | CpAsyncCommit | CpAsyncWait
        | VectorLoad | VectorStore | MmaTf32 | WgmmaTf32 | WgmmaTf32RegisterA | WgmmaFence | WgmmaCommit | WgmmaWait
        | AsyncProxyFence | ThreadFence | AtomicAdd | LetNextKernelLaunch | WaitForPreviousKernel | Comment)


OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY = 90
"""The first GPUs whose kernels can overlap the previous kernel's launch (Hopper, sm_90)."""


@attrs.frozen
class Launch:
    """Blocks of ``block`` threads in a ``grid``; ``cluster`` blocks along x run at once as a
    cluster, (1, 1, 1) where the blocks are independent. With ``overlaps_previous_kernel``, the
    kernel may launch while the kernel before it on the stream still runs, and waits for it
    (``WaitForPreviousKernel``) before touching memory: its launch and the start of its blocks
    are hidden behind the other kernel's last blocks."""

    grid: tuple[int, int, int] = attrs.field(converter=tuple)
    block: tuple[int, int, int] = attrs.field(converter=tuple)
    dynamic_shared_bytes: int = 0
    cluster: tuple[int, int, int] = attrs.field(converter=tuple, default=(1, 1, 1))
    overlaps_previous_kernel: bool = False

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


@attrs.frozen
class Kernel:
    name: str
    params: tuple[Param, ...] = attrs.field(converter=tuple)
    arrays: tuple[Array, ...] = attrs.field(converter=tuple)
    body: tuple[Stmt, ...] = attrs.field(converter=tuple)
    launch: Launch

    def array(self, name: str) -> Param | Array:
        for a in self.params + self.arrays:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def shared_bytes(self) -> int:
        return sum(a.bytes for a in self.arrays if a.space == "shared")


@attrs.frozen
class Program:
    """Kernel IR kernels in launch order; parameter names are the Loop IR buffer names."""

    kernels: tuple[Kernel, ...] = attrs.field(converter=tuple)


# --- traversal ---------------------------------------------------------------

def statements(body: tuple[Stmt, ...]) -> Iterator[Stmt]:
    for s in body:
        yield s
        if isinstance(s, For):
            yield from statements(s.body)
        elif isinstance(s, If):
            yield from statements(s.then)
            yield from statements(s.orelse)


def expressions(s: Stmt) -> tuple[Expr, ...]:
    if isinstance(s, Declare):
        return (s.init,) if s.init is not None else ()
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, Store):
        return s.index + (s.value,)
    if isinstance(s, For):
        return (s.start, s.stop)
    if isinstance(s, If):
        return (s.cond,)
    if isinstance(s, CpAsync):
        return s.dst_index + s.src_index + ((s.predicate,) if s.predicate is not None else ())
    if isinstance(s, (VectorLoad, VectorStore)):
        return s.dst_index + s.src_index
    if isinstance(s, MmaTf32):
        return tuple(i for place in s.acc_index for i in place) + s.a + s.b
    if isinstance(s, WgmmaTf32):
        return tuple(i for place in s.acc_index for i in place) + s.a_index + s.b_index
    if isinstance(s, WgmmaTf32RegisterA):
        return tuple(i for place in s.acc_index for i in place) + s.a + s.b_index
    if isinstance(s, AtomicAdd):
        return s.dst_index + (s.index, s.value)
    return ()


def rename_arrays(kernel: Kernel, mapping: dict[str, str], name: str | None = None) -> Kernel:
    """The same kernel with arrays (parameters, shared and register arrays) renamed by
    ``mapping``, and the kernel itself renamed to ``name`` if given."""

    def rename(n: Expr) -> Expr | None:
        return attrs.evolve(n, array=mapping[n.array]) if isinstance(n, (Load, ClusterLoad)) and n.array in mapping else None

    def rename_expr(e: Expr) -> Expr:
        return ex.transform(e, rename)

    def rename_body(body):
        out = []
        for s in body:
            if isinstance(s, For):
                s = attrs.evolve(s, start=rename_expr(s.start), stop=rename_expr(s.stop), body=rename_body(s.body))
            elif isinstance(s, If):
                s = attrs.evolve(s, cond=rename_expr(s.cond), then=rename_body(s.then), orelse=rename_body(s.orelse))
            elif isinstance(s, Declare) and s.init is not None:
                s = attrs.evolve(s, init=rename_expr(s.init))
            elif isinstance(s, Assign):
                s = attrs.evolve(s, value=rename_expr(s.value))
            elif isinstance(s, Store):
                s = attrs.evolve(s, array=mapping.get(s.array, s.array), index=tuple(map(rename_expr, s.index)), value=rename_expr(s.value))
            elif isinstance(s, CpAsync):
                s = attrs.evolve(
                    s, dst=mapping.get(s.dst, s.dst), src=mapping.get(s.src, s.src),
                    dst_index=tuple(map(rename_expr, s.dst_index)), src_index=tuple(map(rename_expr, s.src_index)),
                    predicate=None if s.predicate is None else rename_expr(s.predicate),
                )
            elif isinstance(s, (VectorLoad, VectorStore)):
                s = attrs.evolve(
                    s, dst=mapping.get(s.dst, s.dst), src=mapping.get(s.src, s.src),
                    dst_index=tuple(map(rename_expr, s.dst_index)), src_index=tuple(map(rename_expr, s.src_index)),
                )
            elif isinstance(s, MmaTf32):
                s = attrs.evolve(
                    s, acc=mapping.get(s.acc, s.acc), acc_index=[tuple(map(rename_expr, i)) for i in s.acc_index],
                    a=tuple(map(rename_expr, s.a)), b=tuple(map(rename_expr, s.b)),
                )
            elif isinstance(s, WgmmaTf32):
                s = attrs.evolve(
                    s, acc=mapping.get(s.acc, s.acc), acc_index=[tuple(map(rename_expr, i)) for i in s.acc_index],
                    a=mapping.get(s.a, s.a), a_index=tuple(map(rename_expr, s.a_index)),
                    b=mapping.get(s.b, s.b), b_index=tuple(map(rename_expr, s.b_index)),
                )
            elif isinstance(s, WgmmaTf32RegisterA):
                s = attrs.evolve(
                    s, acc=mapping.get(s.acc, s.acc), acc_index=[tuple(map(rename_expr, i)) for i in s.acc_index],
                    a=tuple(map(rename_expr, s.a)), b=mapping.get(s.b, s.b), b_index=tuple(map(rename_expr, s.b_index)),
                )
            elif isinstance(s, AtomicAdd):
                s = attrs.evolve(s, dst=mapping.get(s.dst, s.dst), dst_index=tuple(map(rename_expr, s.dst_index)),
                                 array=mapping.get(s.array, s.array), index=rename_expr(s.index),
                                 value=rename_expr(s.value))
            out.append(s)
        return tuple(out)

    return attrs.evolve(
        kernel,
        name=kernel.name if name is None else name,
        params=tuple(attrs.evolve(p, name=mapping.get(p.name, p.name)) for p in kernel.params),
        arrays=tuple(attrs.evolve(a, name=mapping.get(a.name, a.name)) for a in kernel.arrays),
        body=rename_body(kernel.body),
    )


# --- printing ----------------------------------------------------------------

def _leaf(e: Expr):
    if isinstance(e, Special):
        return f"{e.kind}.{e.axis}"
    if isinstance(e, Load):
        return e.array + "".join(f"[{format_expr(i)}]" for i in e.index)
    if isinstance(e, ShuffleXor):
        return f"shuffle_xor({format_expr(e.value)}, {e.lane_mask})"
    if isinstance(e, ClusterLoad):
        return e.array + "".join(f"[{format_expr(i)}]" for i in e.index) + f" of cluster block {format_expr(e.rank)}"
    if isinstance(e, Tf32):
        return f"tf32({format_expr(e.value)})"
    return None


def format_expr(e: Expr) -> str:
    return ex.format_expr(e, _leaf)


def _index(idx) -> str:
    return "".join(f"[{format_expr(i)}]" for i in idx)


def format_body(body, indent: str) -> list[str]:
    lines = []
    for s in body:
        if isinstance(s, Declare):
            init = f" = {format_expr(s.init)}" if s.init is not None else ""
            lines.append(f"{indent}var {s.var}: {s.dtype}{init}")
        elif isinstance(s, Assign):
            lines.append(f"{indent}{s.var} = {format_expr(s.value)}")
        elif isinstance(s, Store):
            lines.append(f"{indent}{s.array}{_index(s.index)} = {format_expr(s.value)}")
        elif isinstance(s, For):
            step = f", step {s.step}" if s.step != 1 else ""
            unroll = "unrolled " if s.unroll else ""
            lines.append(f"{indent}{unroll}for {s.var} in {format_expr(s.start)}..{format_expr(s.stop)}{step}:")
            lines += format_body(s.body, indent + "  ")
        elif isinstance(s, If):
            lines.append(f"{indent}if {format_expr(s.cond)}:")
            lines += format_body(s.then, indent + "  ")
            if s.orelse:
                lines.append(f"{indent}else:")
                lines += format_body(s.orelse, indent + "  ")
        elif isinstance(s, Barrier):
            lines.append(f"{indent}barrier")
        elif isinstance(s, ClusterBarrier):
            lines.append(f"{indent}cluster barrier")
        elif isinstance(s, CpAsync):
            pred = f" if {format_expr(s.predicate)} else zero" if s.predicate is not None else ""
            lines.append(f"{indent}cp.async {s.bytes} B {s.dst}{_index(s.dst_index)} <- {s.src}{_index(s.src_index)}{pred}")
        elif isinstance(s, CpAsyncCommit):
            lines.append(f"{indent}cp.async commit")
        elif isinstance(s, CpAsyncWait):
            lines.append(f"{indent}cp.async wait (at most {s.pending} pending)")
        elif isinstance(s, VectorLoad):
            hint = " through L2" if s.cache == "l2" else ""
            lines.append(f"{indent}vector load x{s.width}{hint} {s.dst}{_index(s.dst_index)} <- "
                         f"{s.src}{_index(s.src_index)}")
        elif isinstance(s, VectorStore):
            hint = " evict-first" if s.cache == "evict_first" else ""
            lines.append(f"{indent}vector store x{s.width}{hint} {s.dst}{_index(s.dst_index)} <- "
                         f"{s.src}{_index(s.src_index)}")
        elif isinstance(s, MmaTf32):
            acc = ", ".join(s.acc + _index(i) for i in s.acc_index)
            a, b = (", ".join(map(format_expr, values)) for values in (s.a, s.b))
            lines.append(f"{indent}mma m16n8k8 tf32 ({acc}) += ({a}) x ({b})")
        elif isinstance(s, (WgmmaTf32, WgmmaTf32RegisterA)):
            lines.append(f"{indent}{_format_wgmma(s)}")
        elif isinstance(s, WgmmaFence):
            lines.append(f"{indent}wgmma fence")
        elif isinstance(s, WgmmaCommit):
            lines.append(f"{indent}wgmma commit")
        elif isinstance(s, WgmmaWait):
            lines.append(f"{indent}wgmma wait (at most {s.pending} pending)")
        elif isinstance(s, AsyncProxyFence):
            lines.append(f"{indent}fence shared memory for the async proxy")
        elif isinstance(s, ThreadFence):
            lines.append(f"{indent}fence global memory for the grid")
        elif isinstance(s, AtomicAdd):
            lines.append(f"{indent}{s.dst}{_index(s.dst_index)} = atomic add({s.array}[{format_expr(s.index)}], "
                         f"{format_expr(s.value)})")
        elif isinstance(s, LetNextKernelLaunch):
            lines.append(f"{indent}let the next kernel launch")
        elif isinstance(s, WaitForPreviousKernel):
            lines.append(f"{indent}wait for the previous kernel")
        elif isinstance(s, Comment):
            lines.append(f"{indent}# {s.text}")
    return lines


def _operand_rows(array: str, index: tuple[Expr, ...], rows: int) -> str:
    """``a[slot][r .. r + 63][k .. k + 7]``: the rows and columns a wgmma operand spans."""
    *leading, row, column = index
    return f"{array}{_index(leading)}[{_span(row, rows)}][{_span(column, WGMMA_K)}]"


def _span(first: Expr, count: int) -> str:
    if isinstance(first, ex.Const):
        return f"{int(first.value)}..{int(first.value) + count - 1}"
    return f"{format_expr(first)} + 0..{count - 1}"


def _register_values(values: tuple[Expr, ...]) -> str:
    """``a[j][0..3]`` for the four values of A where they are one register row, in order."""
    first = values[0]
    if all(isinstance(v, Load) and v.array == first.array and v.index[:-1] == first.index[:-1]
           and v.index[-1] == ex.const(p) for p, v in enumerate(values)):
        return f"{first.array}{_index(first.index[:-1])}[0..{len(values) - 1}]"
    return f"({', '.join(map(format_expr, values))})"


def _format_wgmma(s: WgmmaTf32 | WgmmaTf32RegisterA) -> str:
    first, last = s.acc_index[0], s.acc_index[-1]
    acc = f"{s.acc}{_index(first)}..{s.acc}{_index(last)}"
    sign = "+=" if s.accumulate else "="
    if isinstance(s, WgmmaTf32RegisterA):
        a = _register_values(s.a)
    else:
        a = _operand_rows(s.a, s.a_index, WGMMA_M)
    b = _operand_rows(s.b, s.b_index, s.n)
    return f"wgmma m{WGMMA_M}n{s.n}k{WGMMA_K} tf32 ({acc}) {sign} {a} x {b}^T"


def format_kernel(k: Kernel) -> str:
    g, b = k.launch.grid, k.launch.block
    c = k.launch.cluster
    lines = [f"kernel {k.name}  grid ({g[0]}, {g[1]}, {g[2]})  block ({b[0]}, {b[1]}, {b[2]})"
             + (f"  cluster ({c[0]}, {c[1]}, {c[2]})" if c != (1, 1, 1) else "")
             + (f"  dynamic shared {k.launch.dynamic_shared_bytes} B" if k.launch.dynamic_shared_bytes else "")
             + ("  overlapping the previous kernel" if k.launch.overlaps_previous_kernel else "")]
    for p in k.params:
        mode = "scratch" if p.scratch else "out" if p.writable else "in"
        lines.append(f"  param {mode} {p.name}: {p.dtype}[{p.numel}]")
    for a in k.arrays:
        swizzle = f", {a.swizzle}-byte swizzle" if a.swizzle else ""
        lines.append(f"  {a.space} {a.name}: {a.dtype}{''.join(f'[{n}]' for n in a.shape)}{swizzle}")
    lines += format_body(k.body, "  ")
    return "\n".join(lines)


def format_program(p: Program) -> str:
    return "\n\n".join(format_kernel(k) for k in p.kernels)


# --- verification ------------------------------------------------------------

def verify_kernel(k: Kernel, max_threads: int = 1024, max_shared_bytes: int = 48 * 1024) -> None:
    problems: list[str] = []
    arrays = {a.name: a for a in k.params + k.arrays}
    for a in k.arrays:
        if a.space not in ("shared", "register"):
            problems.append(f"array {a.name} is in unknown space {a.space}")
        problems.extend(_swizzle_problems(a))

    def rank(name):
        a = arrays[name]
        return 1 if isinstance(a, Param) else len(a.shape)

    def check_expr(e, scope):
        for node in ex.walk(e):
            if isinstance(node, Load):
                if node.array not in arrays:
                    problems.append(f"load from unknown array {node.array}")
                elif len(node.index) != rank(node.array):
                    problems.append(f"load from {node.array} with {len(node.index)} indices; it has rank {rank(node.array)}")
            elif isinstance(node, ex.Var) and node.name not in scope:
                problems.append(f"variable {node.name} is used before it is declared")
            elif isinstance(node, Special) and (node.kind not in SPECIALS or node.axis not in ("x", "y", "z")):
                problems.append(f"unknown special {node.kind}.{node.axis}")
            elif isinstance(node, ClusterLoad):
                array = arrays.get(node.array)
                if not isinstance(array, Array) or array.space != "shared":
                    problems.append(f"cluster load from {node.array}: it is not a shared array")
                elif len(node.index) != len(array.shape):
                    problems.append(f"cluster load from {node.array} with {len(node.index)} indices; "
                                    f"it has rank {len(array.shape)}")
                elif node.dtype != dtypes.float32:
                    problems.append(f"cluster load of {node.dtype} from {node.array}: only f32 is supported")
            elif isinstance(node, Tf32) and node.value.dtype != dtypes.float32:
                problems.append(f"tf32 rounding of a {node.value.dtype} value; it rounds f32 values")
            elif isinstance(node, ShuffleXor):
                if not 0 < node.lane_mask < WARP_SIZE:
                    problems.append(f"shuffle lane mask {node.lane_mask} is outside 1..{WARP_SIZE - 1}")
                if node.dtype == dtypes.bool_:
                    problems.append("shuffle of a bool value; shuffle an integer or floating-point value")

    def visit(body, scope):
        scope = set(scope)
        for s in body:
            for e in expressions(s):
                check_expr(e, scope)
            if isinstance(s, Declare):
                scope.add(s.var)
            elif isinstance(s, Assign) and s.var not in scope:
                problems.append(f"assignment to undeclared {s.var}")
            elif isinstance(s, Store):
                if s.array not in arrays:
                    problems.append(f"store to unknown array {s.array}")
                elif isinstance(arrays[s.array], Param) and not arrays[s.array].writable:
                    problems.append(f"store to input parameter {s.array}")
                elif len(s.index) != rank(s.array):
                    problems.append(f"store to {s.array} with {len(s.index)} indices; it has rank {rank(s.array)}")
            elif isinstance(s, For):
                visit(s.body, scope | {s.var})
            elif isinstance(s, If):
                visit(s.then, scope)
                visit(s.orelse, scope)
            elif isinstance(s, CpAsync):
                dst, src = arrays.get(s.dst), arrays.get(s.src)
                if not isinstance(dst, Array) or dst.space != "shared":
                    problems.append(f"cp.async destination {s.dst} is not a shared array")
                if not isinstance(src, Param):
                    problems.append(f"cp.async source {s.src} is not a global parameter")
                if s.bytes not in (4, 8, 16):
                    problems.append(f"cp.async copies 4, 8 or 16 bytes, not {s.bytes}")
            elif isinstance(s, (VectorLoad, VectorStore)):
                problems.extend(_vector_access_problems(s, arrays))
            elif isinstance(s, MmaTf32):
                problems.extend(_mma_problems(s, arrays))
            elif isinstance(s, (WgmmaTf32, WgmmaTf32RegisterA)):
                problems.extend(_wgmma_problems(s, arrays))
            elif isinstance(s, AtomicAdd):
                problems.extend(_atomic_problems(s, arrays))

    visit(k.body, set())
    problems.extend(_overlap_problems(k))
    problems.extend(f"scratch parameter {p.name} is not writable" for p in k.params if p.scratch and not p.writable)
    cluster = k.launch.cluster
    if len(cluster) != 3 or cluster[1:] != (1, 1) or not 1 <= cluster[0] <= MAX_CLUSTER_BLOCKS:
        problems.append(f"cluster {tuple(cluster)}: clusters are 1 to {MAX_CLUSTER_BLOCKS} blocks along x")
    elif k.launch.grid[0] % cluster[0]:
        problems.append(f"grid x of {k.launch.grid[0]} blocks is not a whole number of clusters of {cluster[0]}")
    if k.launch.threads_per_block > max_threads:
        problems.append(f"{k.launch.threads_per_block} threads per block exceed {max_threads}")
    if k.shared_bytes > max_shared_bytes + k.launch.dynamic_shared_bytes:
        problems.append(f"{k.shared_bytes} B of shared memory exceed the limit")
    if problems:
        raise VerificationError(f"Kernel IR {k.name} is inconsistent:\n  " + "\n  ".join(problems))


def _overlap_problems(k: Kernel) -> list[str]:
    """A kernel launched to overlap the previous one must wait for it first; no other kernel waits."""
    first = next((s for s in k.body if not isinstance(s, (LetNextKernelLaunch, Comment))), None)
    if k.launch.overlaps_previous_kernel and not isinstance(first, WaitForPreviousKernel):
        return ["its launch overlaps the previous kernel's, so its body must start by waiting for that kernel "
                "(after at most letting the next kernel launch, and comments)"]
    if not k.launch.overlaps_previous_kernel and any(isinstance(s, WaitForPreviousKernel) for s in statements(k.body)):
        return ["it waits for the previous kernel, but its launch does not overlap that kernel's"]
    return []


def _vector_access_problems(s: VectorLoad | VectorStore, arrays: dict) -> list[str]:
    """What is wrong with a vector access, as far as it can be seen without running it:
    misalignment shows here only where an index is a constant."""
    kind = "vector load" if isinstance(s, VectorLoad) else "vector store"
    if isinstance(s, VectorLoad):
        (memory, memory_index), (register, register_index) = (s.src, s.src_index), (s.dst, s.dst_index)
    else:
        (memory, memory_index), (register, register_index) = (s.dst, s.dst_index), (s.src, s.src_index)
    param, array = arrays.get(memory), arrays.get(register)
    problems = []
    shared = isinstance(param, Array) and param.space == "shared"
    rank = len(param.shape) if shared else 1
    if not isinstance(param, Param) and not shared:
        problems.append(f"{kind} of {memory}: it is not a global parameter or a shared array")
    elif isinstance(s, VectorStore) and isinstance(param, Param) and not param.writable:
        problems.append(f"{kind} to input parameter {memory}")
    elif len(memory_index) != rank:
        problems.append(f"{kind} of {memory} with {len(memory_index)} indices; it has rank {rank}")
    if not isinstance(array, Array) or array.space != "register":
        problems.append(f"{kind} of {memory} through {register}: it is not a register array")
    elif len(register_index) != len(array.shape):
        problems.append(f"{kind} through {register} with {len(register_index)} indices; it has rank {len(array.shape)}")
    hints = LOAD_CACHE_HINTS if isinstance(s, VectorLoad) else STORE_CACHE_HINTS
    if s.cache not in hints:
        problems.append(f"{kind} of {memory} with cache hint {s.cache!r}; it takes {', '.join(hints)}")
    elif s.cache != "default" and not isinstance(param, Param):
        problems.append(f"{kind} of shared array {memory} with cache hint {s.cache!r}; hints apply to global memory")
    if problems:
        return problems
    if param.dtype != array.dtype:
        problems.append(f"{kind} between {param.dtype} {memory} and {array.dtype} {register}: the types must match")
    if s.width < 2 or s.width * param.dtype.itemsize not in VECTOR_BYTES:
        sizes = ", ".join(map(str, VECTOR_BYTES))
        problems.append(f"{kind} of {s.width} {param.dtype} elements of {memory}: it moves {sizes} bytes, "
                        f"at least 2 elements")
    for name, rows in ((register, array), (memory, param if shared else None)):
        if rows is not None and rows.shape[-1] % s.width:
            problems.append(f"{kind} through {name}: its rows of {rows.shape[-1]} elements are not a whole "
                            f"number of {s.width}-element vectors, so not every vector is aligned")
    for name, idx in ((memory, memory_index[-1]), (register, register_index[-1])):
        if isinstance(idx, ex.Const) and int(idx.value) % s.width:
            problems.append(f"{kind} at element {int(idx.value)} of {name} is not aligned to {s.width} elements")
    last = register_index[-1]
    if isinstance(last, ex.Const) and int(last.value) + s.width > array.shape[-1]:
        problems.append(f"{kind} through {register} at {int(last.value)}..{int(last.value) + s.width - 1} "
                        f"runs past its {array.shape[-1]} elements")
    return problems


def _atomic_problems(s: AtomicAdd, arrays: dict) -> list[str]:
    memory, register = arrays.get(s.array), arrays.get(s.dst)
    if not isinstance(memory, Param) or not memory.writable:
        return [f"atomic add to {s.array}: it must be a writable global parameter"]
    if not isinstance(register, Array) or register.space != "register":
        return [f"atomic add to {s.array} returns into {s.dst}: it must be a register array"]
    if len(s.dst_index) != len(register.shape):
        return [f"atomic add returns into {s.dst} with {len(s.dst_index)} indices; it has rank {len(register.shape)}"]
    if memory.dtype != dtypes.int32 or register.dtype != dtypes.int32:
        return [f"atomic add to {memory.dtype} {s.array} into {register.dtype} {s.dst}: both must be int32"]
    return []


def _accumulator_problems(kind: str, s: MmaTf32 | WgmmaTf32 | WgmmaTf32RegisterA, arrays: dict) -> list[str]:
    acc = arrays.get(s.acc)
    if not isinstance(acc, Array) or acc.space != "register" or acc.dtype != dtypes.float32:
        return [f"{kind} accumulates into {s.acc}: it must be an f32 register array"]
    if any(len(i) != len(acc.shape) for i in s.acc_index):
        return [f"{kind} accumulator of {s.acc} indexed with the wrong number of indices; it has rank "
                f"{len(acc.shape)}"]
    return []


def _mma_problems(s: MmaTf32, arrays: dict) -> list[str]:
    problems = _accumulator_problems("mma", s, arrays)
    if (len(s.acc_index), len(s.a), len(s.b)) != (4, 4, 2):
        problems.append(f"mma m16n8k8 takes 4 accumulators, 4 values of A and 2 of B per lane, not "
                        f"{len(s.acc_index)}, {len(s.a)} and {len(s.b)}")
    if any(v.dtype != dtypes.float32 for v in s.a + s.b):
        problems.append("mma operands must be f32 values (of which the tensor cores read the tf32 part)")
    return problems


def _swizzle_problems(a: Array) -> list[str]:
    if not a.swizzle:
        return []
    if a.swizzle != SWIZZLE_BYTES:
        return [f"array {a.name} has a {a.swizzle}-byte swizzle; Kernel IR knows only the {SWIZZLE_BYTES}-byte one"]
    if a.space != "shared":
        return [f"array {a.name} is swizzled but lives in {a.space} memory; only shared arrays are swizzled"]
    if a.shape[-1] * a.dtype.itemsize != SWIZZLE_BYTES:
        return [f"swizzled array {a.name} has rows of {a.shape[-1] * a.dtype.itemsize} bytes; "
                f"its last axis must span {SWIZZLE_BYTES} bytes"]
    if math.prod(a.shape[:-1]) % 8:
        return [f"swizzled array {a.name} has {math.prod(a.shape[:-1])} rows, not a whole number of the "
                "swizzle's 8-row pattern"]
    return []


def _wgmma_problems(s: WgmmaTf32 | WgmmaTf32RegisterA, arrays: dict) -> list[str]:
    problems = _accumulator_problems("wgmma", s, arrays)
    if s.n % 8 or not 8 <= s.n <= 256:
        problems.append(f"wgmma m64nNk8 takes n a multiple of 8 from 8 to 256, not {s.n}")
    elif len(s.acc_index) != s.n // 2:
        problems.append(f"wgmma m64n{s.n}k8 takes {s.n // 2} accumulators per thread, not {len(s.acc_index)}")
    operands = [(s.b, s.b_index)]
    if isinstance(s, WgmmaTf32RegisterA):
        problems.extend(_register_a_problems(s, arrays))
    else:
        operands.insert(0, (s.a, s.a_index))
    for name, idx in operands:
        operand = arrays.get(name)
        if not isinstance(operand, Array) or operand.space != "shared" or operand.dtype != dtypes.float32 \
                or operand.swizzle != SWIZZLE_BYTES:
            problems.append(f"wgmma reads {name}: it must be an f32 shared array in the {SWIZZLE_BYTES}-byte swizzle")
        elif len(idx) != len(operand.shape):
            problems.append(f"wgmma operand {name} indexed with {len(idx)} indices; it has rank {len(operand.shape)}")
        else:
            for what, value in (("row", idx[-2]), ("column", idx[-1])):
                if isinstance(value, ex.Const) and int(value.value) % 8:
                    problems.append(f"wgmma operand {name} starts at {what} {int(value.value)}, not a multiple of 8")
    return problems


def _register_a_problems(s: WgmmaTf32RegisterA, arrays: dict) -> list[str]:
    if len(s.a) != 4:
        return [f"wgmma with A from registers takes 4 values of A per thread, not {len(s.a)}"]
    for value in s.a:
        source = arrays.get(value.array) if isinstance(value, Load) else None
        if not isinstance(source, Array) or source.space != "register" or source.dtype != dtypes.float32:
            return [f"wgmma reads A from {format_expr(value)}: each value of A must be an element of an f32 register "
                    "array, which the asynchronous protocol keeps unchanged until the wgmma is done"]
    return []


def verify_program(p: Program) -> None:
    for k in p.kernels:
        verify_kernel(k)

"""Hopper's tensor memory accelerator (TMA) as Kernel IR: tensor maps and tiled copies.

A ``TensorMap`` describes a 2-D tensor in a global parameter (its shape, row stride, element
type) and the box that one copy moves; the CUDA backend encodes it on the host
(``cuTensorMapEncodeTiled``) and passes it to the kernel by value. A ``TmaLoad`` is one
thread asking the TMA unit to copy a box from coordinates of the tensor into shared memory
(PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk.tensor"), the bytes of
the box completing on an mbarrier (``mbarrier::complete_tx::bytes``). Elements of the box
outside the tensor (past its last row or column, or at negative coordinates) are filled with
zeros and still count toward the bytes, so ragged edges need no guards. With ``swizzle = 128``
the box lands in the 128-byte swizzle that wgmma reads (``Array.swizzle``). A ``TmaStore`` copies
a box back from shared memory, writing only the elements inside the tensor.
"""

from __future__ import annotations

import attrs

from lamina.core.ir.expr import Expr
from lamina.core.ir.sizes import Size

TMA_SWIZZLES = (0, 128)
"""The swizzles a tensor map may ask for: none, or the 128-byte one of ``Array.swizzle``."""
MAX_BOX = 256
"""The most elements a box spans along one dimension."""
GLOBAL_ALIGNMENT = 16
"""A tensor's start and row stride must be multiples of this many bytes."""


@attrs.frozen
class TensorMap:
    """``shape[0]`` rows of ``shape[1]`` elements of global parameter ``param``, row ``r`` from
    element ``r * row_stride``, copied in boxes of ``box[0]`` rows of ``box[1]`` elements.

    The row stride must span a multiple of 16 bytes: the TMA cannot address other rows (a bf16
    tensor of 50 columns needs padding to 56). With ``swizzle = 128`` a box row spans at most
    128 bytes and lands swizzled. The shape may hold sizes known only at run time (``s0`` rows):
    the launch encodes the map at the call's sizes."""

    name: str
    param: str
    shape: tuple[Size, Size] = attrs.field(converter=tuple)
    row_stride: int
    box: tuple[int, int] = attrs.field(converter=tuple)
    swizzle: int = 0


@attrs.frozen
class TmaLoad:
    """Copy the box of ``tensor_map`` whose first element is at (``row``, ``column``) of the
    tensor into shared array ``dst`` from ``dst_index`` = (leading indices..., r, 0) on: box row
    ``i`` to row ``r + i`` of the last two axes, whose rows are as long as the box's (the TMA lays
    the box's rows one after the other). Its bytes (the whole box,
    zero-filled elements included) complete on mbarrier ``barrier[barrier_index]``. The thread
    that runs it issues one copy; the data may be read once a wait on the barrier's phase passed.

    With ``multicast``, the box lands in each block of the cluster whose rank (``blockIdx.x``
    modulo the cluster's blocks) is listed, at the same place of its own ``dst``, and its bytes
    complete on that block's own ``barrier[barrier_index]`` (``.multicast::cluster``): blocks that
    need the same box each copy a part of it for all (the issuing block receives it only where
    its own rank is listed).
    """

    dst: str
    dst_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    tensor_map: str
    row: Expr
    column: Expr
    barrier: str
    barrier_index: tuple[Expr, ...] = attrs.field(converter=tuple)
    multicast: tuple[int, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class TmaStore:
    """Copy a box of ``tensor_map`` from shared array ``src`` (from ``src_index`` on, laid out as a
    ``TmaLoad`` lays it) to the tensor from (``row``, ``column``) on
    (``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group``); the box's elements past the
    tensor's end are not written, but unlike a load's, its start must lie inside the tensor: a
    negative coordinate stops the kernel with an illegal instruction. The threads that wrote ``src`` must have made their writes visible to
    the TMA unit (``AsyncProxyFence``, then a ``Barrier``). The copy joins the issuing thread's
    open bulk group: ``src`` may be written again only after a ``TmaStoreWait`` covers the group
    that ``TmaStoreCommit`` closed, and the kernel must wait for every group before it ends."""

    tensor_map: str
    row: Expr
    column: Expr
    src: str
    src_index: tuple[Expr, ...] = attrs.field(converter=tuple)


@attrs.frozen
class TmaStoreCommit:
    """Close the thread's open group of TMA stores (``cp.async.bulk.commit_group``)."""


@attrs.frozen
class TmaStoreWait:
    """Wait until at most ``pending`` of the thread's groups of TMA stores still read shared memory
    (``cp.async.bulk.wait_group.read``)."""

    pending: int = 0


TMA_STATEMENTS = (TmaLoad, TmaStore, TmaStoreCommit, TmaStoreWait)

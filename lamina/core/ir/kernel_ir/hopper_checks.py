"""The verifier's checks of the mbarrier and TMA statements and of tensor maps: each returns
the problems it finds as sentences (``verifier`` gathers them)."""

from __future__ import annotations

from lamina.core.ir import dtypes, expr as ex, sizes
from lamina.core.ir.kernel_ir.hopper import SWIZZLE_BYTES
from lamina.core.ir.kernel_ir.hopper_barriers import MAX_TRANSACTION_BYTES, MbarrierArrive, MbarrierInit
from lamina.core.ir.kernel_ir.hopper_tma import GLOBAL_ALIGNMENT, MAX_BOX, TMA_SWIZZLES, TensorMap, TmaLoad, TmaStore
from lamina.core.ir.kernel_ir.nodes import Array, Load, Param, Store, VectorLoad, VectorStore
from lamina.core.ir.kernel_ir.traversal import expressions, statements


def barrier_arrays(body) -> set[str]:
    """The shared arrays that hold mbarriers: those the mbarrier statements and TMA copies name."""
    names = set()
    for s in statements(body):
        barrier = getattr(s, "barrier", None)
        if isinstance(barrier, str):
            names.add(barrier)
    return names


def mbarrier_problems(s, arrays: dict, cluster_blocks: int = 1) -> list[str]:
    """An mbarrier statement names an element of a shared int64 array; counts within the hardware's;
    an arrival on another block's barrier is made in a cluster, and expects no bytes."""
    problems = barrier_element_problems(s.barrier, s.index, arrays)
    if isinstance(s, MbarrierArrive) and s.rank is not None:
        if cluster_blocks == 1:
            problems.append(f"mbarrier arrive on {s.barrier} of another block of the cluster, in a kernel launched "
                            "without clusters")
        if s.transaction_bytes:
            problems.append(f"mbarrier arrive on {s.barrier} of another block of the cluster expecting "
                            f"{s.transaction_bytes} bytes; only a block's own arrivals may expect bytes")
    if isinstance(s, MbarrierInit) and not 1 <= s.arrivals <= MAX_TRANSACTION_BYTES:
        problems.append(f"mbarrier {s.barrier} initialised for {s.arrivals} arrivals; a phase expects 1 to "
                        f"{MAX_TRANSACTION_BYTES}")
    if isinstance(s, MbarrierArrive) and not 0 <= s.transaction_bytes <= MAX_TRANSACTION_BYTES:
        problems.append(f"mbarrier arrive on {s.barrier} expecting {s.transaction_bytes} bytes; a phase expects 0 to "
                        f"{MAX_TRANSACTION_BYTES}")
    return problems


def barrier_element_problems(name: str, index: tuple, arrays: dict) -> list[str]:
    array = arrays.get(name)
    if not isinstance(array, Array) or array.space != "shared" or array.dtype != dtypes.int64 or array.swizzle:
        return [f"mbarrier {name} is not an unswizzled shared int64 array; declare its mbarriers as one"]
    if len(index) != len(array.shape):
        return [f"mbarrier {name} indexed with {len(index)} indices; it has rank {len(array.shape)}"]
    return []


def barrier_access_problems(body, barriers: set[str]) -> list[str]:
    """Only mbarrier statements touch an mbarrier: its bits are the hardware's."""
    problems = []
    for s in statements(body):
        touched = {getattr(s, field, None) for field in ("array", "dst", "src")}
        if isinstance(s, (Store, VectorLoad, VectorStore, TmaLoad, TmaStore)) and touched & barriers:
            problems.append(f"{type(s).__name__} touches mbarrier array {sorted(touched & barriers)[0]}; only mbarrier "
                            "statements may")
        for e in expressions(s):
            for node in ex.walk(e):
                if isinstance(node, Load) and node.array in barriers:
                    problems.append(f"load from mbarrier array {node.array}; only mbarrier statements may touch it")
    return problems


def tensor_map_problems(m: TensorMap, arrays: dict) -> list[str]:
    """What ``cuTensorMapEncodeTiled`` would refuse, said before any GPU sees it."""
    param = arrays.get(m.param)
    if not isinstance(param, Param):
        return [f"tensor map {m.name} describes {m.param}, which is not a global parameter"]
    size = param.dtype.itemsize
    rows, columns = m.shape
    problems = []
    if any(isinstance(n, int) and n < 1 for n in (rows, columns, *m.box)):
        problems.append(f"tensor map {m.name} has shape {tuple(m.shape)} and box {tuple(m.box)}; both must be positive")
    if max(m.box) > MAX_BOX:
        problems.append(f"tensor map {m.name} has a box of {tuple(m.box)}; a box spans at most {MAX_BOX} elements "
                        "a side")
    if (m.row_stride * size) % GLOBAL_ALIGNMENT or (isinstance(columns, int) and m.row_stride < columns):
        problems.append(f"tensor map {m.name}: rows {m.row_stride} elements ({m.row_stride * size} bytes) apart, for "
                        f"rows of {columns}; the TMA needs rows a multiple of {GLOBAL_ALIGNMENT} bytes apart, at least "
                        "a row long: pad the tensor's rows")
    span = sizes.size((rows - 1) * m.row_stride + columns)
    beyond = sizes.size(span - param.numel)  # a number where the sizes known only at run time cancel out
    if isinstance(beyond, int) and beyond > 0:
        problems.append(f"tensor map {m.name} spans {span} elements of {m.param}, which has {param.numel}")
    if m.swizzle not in TMA_SWIZZLES:
        problems.append(f"tensor map {m.name} has a {m.swizzle}-byte swizzle; it takes "
                        f"{' or '.join(map(str, TMA_SWIZZLES))}")
    elif m.swizzle and m.box[1] * size > m.swizzle:
        problems.append(f"tensor map {m.name}: box rows of {m.box[1] * size} bytes exceed its {m.swizzle}-byte swizzle")
    if (m.box[1] * size) % 16:
        problems.append(f"tensor map {m.name}: box rows of {m.box[1] * size} bytes; the TMA moves multiples of 16 bytes")
    return problems


def tma_load_problems(s: TmaLoad, arrays: dict, maps: dict, cluster_blocks: int = 1) -> list[str]:
    if s.tensor_map not in maps:
        return [f"tma load through unknown tensor map {s.tensor_map}"]
    problems = barrier_element_problems(s.barrier, s.barrier_index, arrays)
    if s.multicast and (len(set(s.multicast)) != len(s.multicast)
                        or not all(0 <= rank < cluster_blocks for rank in s.multicast) or cluster_blocks == 1):
        problems.append(f"tma load into {s.dst} multicast to the cluster's blocks {list(s.multicast)}, in clusters "
                        f"of {cluster_blocks} blocks: name distinct ranks of a cluster of two or more")
    return problems + _box_problems("tma load into", maps[s.tensor_map], s.dst, s.dst_index, arrays)


def tma_store_problems(s: TmaStore, arrays: dict, maps: dict) -> list[str]:
    if s.tensor_map not in maps:
        return [f"tma store through unknown tensor map {s.tensor_map}"]
    m = maps[s.tensor_map]
    param = arrays.get(m.param)
    problems = [] if not isinstance(param, Param) or param.writable else [f"tma store to input parameter {m.param}"]
    return problems + _box_problems("tma store from", m, s.src, s.src_index, arrays)


def _box_problems(what: str, m: TensorMap, name: str, index: tuple, arrays: dict) -> list[str]:
    """The shared side of a TMA copy holds its box as the tensor map lays it out."""
    array, param = arrays.get(name), arrays.get(m.param)
    if not isinstance(array, Array) or array.space != "shared" or len(array.shape) < 2:
        return [f"{what} {name}: it must be a shared array of rank 2 or more"]
    problems = []
    if len(index) != len(array.shape):
        problems.append(f"{what} {name} with {len(index)} indices; it has rank {len(array.shape)}")
    if isinstance(param, Param) and param.dtype != array.dtype:
        problems.append(f"{what} {array.dtype} array {name} through {m.name} of {param.dtype} {m.param}: the types "
                        "must match")
    if array.swizzle != m.swizzle:
        problems.append(f"{what} {name} ({array.swizzle or 'no'} swizzle) through {m.name} ({m.swizzle or 'no'} "
                        "swizzle): the box must be laid out as the array is")
    elif array.swizzle and m.box[1] * array.dtype.itemsize != SWIZZLE_BYTES:
        problems.append(f"{what} swizzled {name} through {m.name}: box rows must span the swizzle's "
                        f"{SWIZZLE_BYTES} bytes")
    if m.box[1] != array.shape[-1] or m.box[0] > array.shape[-2]:
        problems.append(f"{what} {name} of [{m.box[0]}][{m.box[1]}] boxes, whose last axes are "
                        f"[{array.shape[-2]}][{array.shape[-1]}]: the TMA lays a box's rows one after the other, so "
                        "the array's rows must be as long as the box's")
    return problems

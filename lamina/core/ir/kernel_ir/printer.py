"""Kernel IR's printed form, which ``lamina compile --ir kernel`` shows and the golden tests keep."""

from __future__ import annotations

from lamina.core.ir import expr as ex
from lamina.core.ir.expr import Expr
from lamina.core.ir import dtypes
from lamina.core.ir.kernel_ir.hopper import (
    N_MAJOR,
    SWIZZLE_PANEL,
    WGMMA_M,
    AsyncProxyFence,
    ClusterBarrier,
    ClusterLoad,
    LetNextKernelLaunch,
    WaitForPreviousKernel,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from lamina.core.ir.kernel_ir.hopper_barriers import MbarrierArrive, MbarrierInit, MbarrierWait
from lamina.core.ir.kernel_ir.hopper_tma import TensorMap, TmaLoad, TmaStore, TmaStoreCommit, TmaStoreWait
from lamina.core.ir.kernel_ir.nodes import (
    AtomicAdd,
    Assign,
    Barrier,
    Comment,
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    Declare,
    Divergent,
    For,
    If,
    Kernel,
    Load,
    Mma16,
    MmaTf32,
    PackedPair,
    Program,
    ShuffleXor,
    Special,
    Store,
    Tf32,
    ThreadFence,
    VectorLoad,
    VectorStore,
)


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
    if isinstance(e, PackedPair):
        return f"{e.pair_dtype}x2({format_expr(e.low)}, {format_expr(e.high)})"
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
        elif isinstance(s, Divergent):
            lines.append(f"{indent}each {format_expr(s.group)} of {s.count} at its own pace:")
            lines += format_body(s.body, indent + "  ")
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
        elif isinstance(s, Mma16):
            acc = ", ".join(s.acc + _index(i) for i in s.acc_index)
            a, b = (", ".join(map(format_expr, values)) for values in (s.a, s.b))
            lines.append(f"{indent}mma m16n8k16 {s.operand_dtype} ({acc}) += ({a}) x ({b})")
        elif isinstance(s, Wgmma):
            lines.append(f"{indent}{_format_wgmma(s)}")
        elif isinstance(s, MbarrierInit):
            lines.append(f"{indent}mbarrier init {s.barrier}{_index(s.index)} expecting {s.arrivals} arrivals")
        elif isinstance(s, MbarrierArrive):
            expect = f" expecting {s.transaction_bytes} more bytes" if s.transaction_bytes else ""
            remote = f" of the cluster's block {format_expr(s.rank)}" if s.rank is not None else ""
            lines.append(f"{indent}mbarrier arrive {s.barrier}{_index(s.index)}{remote}{expect}")
        elif isinstance(s, MbarrierWait):
            lines.append(f"{indent}mbarrier wait {s.barrier}{_index(s.index)} for the phase of parity "
                         f"{format_expr(s.parity)}")
        elif isinstance(s, TmaLoad):
            lines.append(f"{indent}tma load {s.dst}{_index(s.dst_index)} <- {s.tensor_map} at "
                         f"({format_expr(s.row)}, {format_expr(s.column)}), completing on "
                         f"{s.barrier}{_index(s.barrier_index)}"
                         + (f", multicast to the cluster's blocks {', '.join(map(str, s.multicast))}"
                            if s.multicast else ""))
        elif isinstance(s, TmaStore):
            lines.append(f"{indent}tma store {s.tensor_map} at ({format_expr(s.row)}, {format_expr(s.column)}) <- "
                         f"{s.src}{_index(s.src_index)}")
        elif isinstance(s, TmaStoreCommit):
            lines.append(f"{indent}tma store commit")
        elif isinstance(s, TmaStoreWait):
            lines.append(f"{indent}tma store wait (at most {s.pending} pending)")
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


def _operand_rows(array: str, index: tuple[Expr, ...], rows: int, k: int) -> str:
    """``a[slot][r .. r + 63][k .. k + 7]``: the rows and columns a wgmma operand spans."""
    *leading, row, column = index
    return f"{array}{_index(leading)}[{_span(row, rows)}][{_span(column, k)}]"


def _span(first: Expr, count: int) -> str:
    if isinstance(first, ex.Const):
        return f"{int(first.value)}..{int(first.value) + count - 1}"
    return f"{format_expr(first)} + 0..{count - 1}"


def _register_values(values: tuple[Expr, ...]) -> str:
    """``a[j][0..3]`` (``a[8..15]``) for the values of A where they are consecutive elements of one
    register row, in order."""
    first = values[0]
    start = first.index[-1] if isinstance(first, Load) and first.index else None
    if isinstance(start, ex.Const) and all(
            isinstance(v, Load) and v.array == first.array and v.index[:-1] == first.index[:-1]
            and v.index[-1] == ex.const(int(start.value) + p) for p, v in enumerate(values)):
        return f"{first.array}{_index(first.index[:-1])}[{_span(start, len(values))}]"
    return f"({', '.join(map(format_expr, values))})"


def _format_wgmma(s: Wgmma) -> str:
    first, last = s.acc_index[0], s.acc_index[-1]
    acc = f"{s.acc}{_index(first)}..{s.acc}{_index(last)}"
    sign = "+=" if s.accumulate else "="
    if s.a_from == "registers":
        a = _register_values(s.a)
    else:
        a = _operand_rows(s.a, s.a_index, WGMMA_M, s.k)
    if s.b_layout == N_MAJOR:
        *leading, panel, row, _ = s.b_index
        panels = _span(panel, -(-s.n // SWIZZLE_PANEL))
        b_text = f"{s.b}{_index(leading)}[{panels}][{_span(row, s.k)}][0..{SWIZZLE_PANEL - 1}] (panels of n)"
    else:
        b_text = _operand_rows(s.b, s.b_index, s.n, s.k) + "^T"
    operands = "tf32" if s.operand_dtype == dtypes.float32 else str(s.operand_dtype)
    return f"wgmma m{WGMMA_M}n{s.n}k{s.k} {operands} ({acc}) {sign} {a} x {b_text}"


def _format_tensor_map(m: TensorMap) -> str:
    swizzle = f", {m.swizzle}-byte swizzle" if m.swizzle else ""
    return (f"  tensor map {m.name}: {m.param}[{m.shape[0]}][{m.shape[1]}] (rows {m.row_stride} apart) in boxes of "
            f"[{m.box[0]}][{m.box[1]}]{swizzle}")


def format_kernel(k: Kernel) -> str:
    g, b = k.launch.grid, k.launch.block
    c = k.launch.cluster
    lines = [f"kernel {k.name}  grid ({g[0]}, {g[1]}, {g[2]})  block ({b[0]}, {b[1]}, {b[2]})"
             + (f"  cluster ({c[0]}, {c[1]}, {c[2]})" if c != (1, 1, 1) else "")
             + (f"  dynamic shared {k.launch.dynamic_shared_bytes} B" if k.launch.dynamic_shared_bytes else "")
             + ("  overlapping the previous kernel" if k.launch.overlaps_previous_kernel else "")]
    for p in k.params:
        mode = ("scratch" if p.zeroed else "scratch unset") if p.scratch else "out" if p.writable else "in"
        lines.append(f"  param {mode} {p.name}: {p.dtype}[{p.numel}]")
    lines += [f"  size {name}" for name in k.sizes]
    for a in k.arrays:
        swizzle = f", {a.swizzle}-byte swizzle" if a.swizzle else ""
        lines.append(f"  {a.space} {a.name}: {a.dtype}{''.join(f'[{n}]' for n in a.shape)}{swizzle}")
    lines += [_format_tensor_map(m) for m in k.tensor_maps]
    lines += format_body(k.body, "  ")
    return "\n".join(lines)


def format_program(p: Program) -> str:
    return "\n\n".join(format_kernel(k) for k in p.kernels)

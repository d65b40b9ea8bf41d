"""A K-major copy of a 16-bit matmul operand that the TMA GEMM could not read as it lies.

The TMA GEMM reads A K-major (``operands.view``): along the reduction, contiguous; B K-major
or, where it lies along n (``W`` in ``x @ W`` stored in by out, GPT-2's ``Conv1D``; attention's
values), in panels of n that the wgmma transposes. An operand it reads neither way (B whose rows
of n are not 16 bytes apart, or whose batches a k-tile would run into) gets a kernel before the
product that copies it with the reduction's axis last, and the product reads the copy: a pass
over the operand, against a product that otherwise runs on the CUDA cores, at about 33 TFLOP/s
in bf16 where the TMA GEMM reaches 550 to 780
(``benchmarks/results/2026-12-02_h200_bench_bfloat16.txt``). The attention kernel reads its
values K-major only, and ``fuse_attention`` copies them with ``copy_k_major``. The copy holds
only the axes the operand moves along: a weight shared by every batch is copied once. Products
of fewer than 64 rows
(``TMA_MIN_ROWS``, a decoding step) stay as they are: the TMA GEMM does not take them; so does
an operand whose copy would run along its rows as it lies, a copy ``inline_pointwise_producers``
inlines again.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.names import fresh_name
from lamina.core.ir.torch_ir import TensorType
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.fusion.inline_pointwise_producers import TMA_MIN_ROWS, copies_along_its_rows
from lamina.plugins.schedules.contraction.recognise import Contraction, NotAContraction, Operand, analyse, contractions
from lamina.plugins.schedules.contraction.wgmma_tma import operands
from lamina.plugins.schedules.contraction.wgmma_tma.operands import padded_shape, with_buffer_in_kernel
from lamina.plugins.schedules.contraction.wgmma_tma.setting import ARCH, operands_problem


class StoreTmaOperandsKMajor:
    name = "store_tma_operands_k_major"
    priority = 7
    """After the fusions that decide which kernels stay (inlining, a product into its row
    reduction), before split-K divides the reductions."""

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability != ARCH:
            return None
        buffers = analysis.buffers(program)
        taken = set(buffers) | {k.name for k in program.kernels}
        kernels = [[k] for k in program.kernels]
        copies: list[loop_ir.Buffer] = []
        untouched = analysis.Untouched()
        for position, c in contractions(program):
            if not untouched.holds(program.kernels[position]):
                continue
            copied = copied_k_major(c, taken)
            if copied is None:
                continue
            copy, rewritten = copied
            (buffer,) = copy.outputs
            untouched.touch(program.kernels[position])
            taken |= {buffer.name, copy.name}
            kernels[position] = [copy, analysis.with_exact_inputs(rewritten, {**buffers, buffer.name: buffer})]
            copies.append(buffer)
        if not copies:
            return None
        return attrs.evolve(program, temporaries=program.temporaries + tuple(copies),
                            kernels=tuple(k for replaced in kernels for k in replaced))


def tma_reads_with_a_copy(c: Contraction, target: Target) -> bool:
    """Whether the TMA GEMM can take the contraction on ``target``, its operands as they lie or one
    of them copied K-major by this rule."""
    if target.compute_capability != ARCH:
        return False
    return _reads_both(c) or copied_k_major(c, {b.name for b in c.kernel.inputs + c.kernel.outputs}) is not None


def copied_k_major(c: Contraction, taken: set[str]) -> tuple[loop_ir.Kernel, loop_ir.Kernel] | None:
    """The kernel that copies the contraction's one unreadable operand K-major (its buffer named
    apart from ``taken``, its rows padded to 16 bytes as ``padded_rows`` pads them), and the
    contraction reading the copy; None where there is no such
    operand, the copy would run along its rows as they lie (``inline_pointwise_producers`` would
    inline it again), or the TMA still could not read the copy."""
    operand = _to_copy(c)
    if operand is None:
        return None
    copied = copy_k_major(c, operand, taken)
    if copied is None or not _reads_k_major(copied[1]):
        return None
    return copied


def copy_k_major(c: Contraction, operand: Operand, taken: set[str]) -> tuple[loop_ir.Kernel, loop_ir.Kernel] | None:
    """The kernel that copies ``operand`` K-major, its rows padded to 16 bytes, and the
    contraction reading the copy; None where the copy would run along the operand's rows as
    they lie or the TMA could not read the copy either."""
    copy, rewritten = _with_copy(c, operand, taken)
    if copies_along_its_rows(analysis.pointwise(copy)):
        return None
    (buffer,) = copy.outputs
    padded = attrs.evolve(buffer, type=padded_shape(buffer.type))
    copy, rewritten = (with_buffer_in_kernel(k, padded) for k in (copy, rewritten))
    try:
        moved = analyse(rewritten)
    except NotAContraction:
        return None
    found = operands.factors(moved)
    if found is None or isinstance(operands.view(moved, found[0 if operand.side == "m" else 1]), str):
        return None
    return copy, rewritten


def _to_copy(c: Contraction) -> Operand | None:
    """The one operand of two 16-bit ones that the TMA cannot read as it lies and a K-major copy
    may let it read, or None."""
    factors = operands.factors(c)
    if factors is None:
        return None
    unreadable = [o for o in factors if isinstance(operands.view(c, o), str)]
    if len(unreadable) != 1:
        return None
    (operand,) = unreadable
    other = c.n if operand.side == "m" else c.m
    if c.hinted().extents[other] < TMA_MIN_ROWS or not _moves_along_one_axis(c, operand):
        return None
    return operand


def _moves_along_one_axis(c: Contraction, operand: Operand) -> bool:
    """Whether the reduction moves the operand along one axis, element by element (the copy
    then reads each element once)."""
    moving = [i for i in operand.load.index if c.reduce_var in ex.free_vars(i)]
    if len(moving) != 1:
        return False
    step = ex.substitute(moving[0], {c.reduce_var: ex.Var(c.reduce_var) + 1}) - moving[0]
    return isinstance(step, ex.Const) and step.value == 1


def _with_copy(c: Contraction, operand: Operand, taken: set[str]) -> tuple[loop_ir.Kernel, loop_ir.Kernel]:
    """A kernel that copies ``operand`` over (its batch axes, its side's variable, the reduction
    variable) into a buffer named apart from ``taken``, and the contraction reading the copy. A
    batch variable that the operand reads only through ``h // g`` (grouped-query attention's
    key-value head) is copied over that head, once per group, not once per query head."""
    groups = _groups(c, operand.load)
    load = ex.transform(operand.load, lambda n: ex.Var(groups[n][0]) if n in groups else None)
    used = set().union(*(ex.free_vars(i) for i in load.index))
    side = c.m if operand.side == "m" else c.n
    extents = {**c.extents, **{var: extent for var, extent in groups.values()}}
    axes = [v for v in [*c.batch, *(var for var, _ in groups.values())] if v in used] + [side, c.reduce_var]
    reads_at = {var: term for term, (var, _) in groups.items()}
    name = fresh_name(f"{operand.load.buffer}_k_major", taken)
    buffer = loop_ir.Buffer(name, TensorType(tuple(extents[v] for v in axes), operand.load.dtype))
    body: tuple = (loop_ir.Store(name, tuple(ex.Var(v) for v in axes), load),)
    for v in reversed(axes):
        body = (loop_ir.Loop(v, extents[v], "parallel", body),)
    copy = loop_ir.Kernel(name, (c.kernel.buffer(operand.load.buffer),), (buffer,), body)
    read = loop_ir.Load(name, tuple(reads_at.get(v, ex.Var(v)) for v in axes), operand.load.dtype)
    known = {**{b.name: b for b in c.kernel.inputs + c.kernel.outputs}, name: buffer}
    body = loop_ir.map_expressions(c.kernel.body,
                                   lambda e: ex.transform(e, lambda n: read if n == operand.load else None))
    return copy, analysis.with_exact_inputs(attrs.evolve(c.kernel, body=body), known)


def _groups(c: Contraction, load: loop_ir.Load) -> dict[ex.Expr, tuple[str, int]]:
    """Each ``v // g`` of a batch variable in ``load``'s index, with a fresh variable that runs
    over its values and their count."""
    taken = set(c.extents) | {v for i in load.index for v in ex.free_vars(i)}
    found: dict[ex.Expr, tuple[str, int]] = {}
    for node in (n for i in load.index for n in ex.walk(i)):
        if isinstance(node, ex.Op) and node.op == "floordiv" and isinstance(node.args[0], ex.Var) \
                and node.args[0].name in c.batch and isinstance(node.args[1], ex.Const) and node.args[1].value > 0 \
                and node not in found:
            var = fresh_name(f"{node.args[0].name}_group", taken)
            taken.add(var)
            found[node] = (var, -(-c.extents[node.args[0].name] // node.args[1].value))
    return found


def _reads_k_major(kernel: loop_ir.Kernel) -> bool:
    """Whether ``kernel`` is a contraction whose two operands the TMA reads."""
    try:
        return _reads_both(analyse(kernel))
    except NotAContraction:
        return False


def _reads_both(c: Contraction) -> bool:
    return operands_problem(c) is None

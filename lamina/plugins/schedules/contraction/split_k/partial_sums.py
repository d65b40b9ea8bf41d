"""A contraction's reduction cut into slices that separate blocks sum, and the kernel that adds them up.

``out[i, j] = epilogue(sum_r A(i, r) * B(r, j))`` with ``S`` slices of length ``L`` becomes two kernels::

    partials[s, i, j] = sum_{r < L} A(i, s*L + r) * B(s*L + r, j)     (s a parallel batch loop)
    out[i, j] = epilogue(sum_{s < S} partials[s, i, j])                 (the combine)

Where ``S`` slices of whole k-tiles cannot be equal, the last is shorter and its sum is
guarded (``slices``).

The partials are stored in the accumulator's dtype, whatever the output's, so that the
sum loses nothing to the split. Operand prologues stay with the operand loads in the
partial kernel; the epilogue moves to the combine. The partial kernel and its buffer are
named after the contraction (``out_partials``), which is how its Tile IR says whose partial
sums it holds, whatever later fusion makes of the combine.
"""

from __future__ import annotations

import re

import attrs

from lamina.core.ir import expr as ex, loop_ir
from lamina.core.ir.names import fresh_name
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.schedules.contraction.recognise import Contraction
from lamina.plugins.schedules.contraction.slices import SLICE_MULTIPLE, guarded, slice_length
from lamina.plugins.schedules.loop_to_kernel import names_in, split_parallel_nest

PARTIALS_SUFFIX = "_partials"
SLICE_VAR = "s"


@attrs.frozen
class SplitContraction:
    """The two kernels that replace a contraction, and the buffer between them."""

    partial: loop_ir.Kernel
    combine: loop_ir.Kernel
    partials: loop_ir.Buffer


@attrs.frozen
class PartialOf:
    """What ``split`` made a kernel of partial sums from: how many slices, of which contraction."""

    splits: int
    of: str


def slices_fit(c: Contraction, splits: int) -> bool:
    """Whether ``splits`` slices of whole k-tiles, none of them empty, can cover the reduction."""
    return slice_length(c.reduce_extent, splits) is not None


def split(c: Contraction, splits: int, taken: set[str], multiple: int = SLICE_MULTIPLE) -> SplitContraction:
    """``c`` as a partial kernel over ``splits`` slices of its reduction, each but the last a
    whole number of ``multiple``s, and a combine kernel.

    ``taken`` holds the program's kernel and buffer names; the new ones are added to it.
    The output's contiguous axis stays innermost in the partials and in the combine's
    loops, so that neighbouring threads of both kernels touch neighbouring elements.
    """
    kernel = c.kernel
    loops, _ = split_parallel_nest(kernel.body)
    loops = tuple(loop for loop in loops if loop.var != c.n) + tuple(loop for loop in loops if loop.var == c.n)
    s = ex.Var(fresh_name(SLICE_VAR, names_in(kernel)))
    name = fresh_name(kernel.name + PARTIALS_SUFFIX, taken)
    partials = loop_ir.Buffer(name, TensorType((splits,) + tuple(loop.extent for loop in loops), c.acc_dtype))
    at = (s,) + tuple(ex.Var(loop.var) for loop in loops)
    acc = ex.Var(c.acc, c.acc_dtype)

    length = slice_length(c.reduce_extent, splits, multiple)
    start = s * length
    if splits * length == c.reduce_extent:
        sliced = ex.substitute(c.value, {c.reduce_var: start + ex.Var(c.reduce_var)})
    else:
        sliced = guarded(c.value, c.reduce_var, start, c.reduce_extent)
    partial_body: tuple[loop_ir.Stmt, ...] = (
        loop_ir.Init(c.acc, c.init),
        loop_ir.Loop(c.reduce_var, length, "reduce", (loop_ir.Accumulate(c.acc, "sum", sliced),)),
        loop_ir.Store(name, at, acc),
    )
    combine_body: tuple[loop_ir.Stmt, ...] = (
        loop_ir.Init(c.acc, c.init),
        loop_ir.Loop(s.name, splits, "reduce", (loop_ir.Accumulate(c.acc, "sum", loop_ir.Load(name, at, c.acc_dtype)),)),
        *c.epilogue,
    )
    partial_body = (loop_ir.Loop(s.name, splits, "parallel", _nest(loops, partial_body)),)
    operands = tuple(b for b in kernel.inputs if b.name in {load.buffer for load in loop_ir.loads((partial_body[0],))})
    partial = loop_ir.Kernel(name, operands, (partials,), partial_body)
    others = tuple(b for b in kernel.inputs if b.name in {load.buffer for load in loop_ir.loads(c.epilogue)})
    combine = attrs.evolve(kernel, inputs=(partials,) + others, body=_nest(loops, combine_body))
    return SplitContraction(partial, combine, partials)


def _nest(loops: tuple[loop_ir.Loop, ...], body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
    for loop in reversed(loops):
        body = (loop_ir.Loop(loop.var, loop.extent, "parallel", body),)
    return body


def partial_of(kernel: loop_ir.Kernel) -> PartialOf | None:
    """What ``split`` says about ``kernel`` if it made it: a kernel named ``<contraction>_partials``
    whose outermost parallel loop picks the slice and whose one store writes the bare sum
    at that slice."""
    named = re.fullmatch(rf"(.+){PARTIALS_SUFFIX}\d*", kernel.name)
    loops, inner = split_parallel_nest(kernel.body)
    if named is None or len(loops) < 2 or len(kernel.outputs) != 1 or kernel.outputs[0].name != kernel.name:
        return None
    store = inner[-1] if inner else None
    slice_var = ex.Var(loops[0].var)
    if not (isinstance(store, loop_ir.Store) and store.buffer == kernel.name and isinstance(store.value, ex.Var)
            and store.index[:1] == (slice_var,) and kernel.outputs[0].type.shape[0] == loops[0].extent):
        return None
    return PartialOf(loops[0].extent, named.group(1))

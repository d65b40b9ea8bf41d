"""Attention of a few queries as one kernel: the decode schedule's fusion rule.

In a decoding step, ``scaled_dot_product_attention`` decomposes into three kernels that the
TMA GEMM cannot take (one query row per head is no matrix): the scores (a dot product per
cached key), their softmax, and the probabilities times the values, with every query head of a
group reading the group's keys and values again. This rule fuses the three as
``fuse_attention`` does for many queries (each loop over the keys computing its score where it
reads it, the values' sum reading the probability as the softmax computed it), where the
``attention_decode`` schedule takes the result: a few rows per group of heads, keys and values
that can be copied 16 bytes at a time. The products here are sums over a reduction loop that
need not have the rows a contraction schedule tiles (``_sum``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping


from lamina.core.errors import ScheduleError
from lamina.core.ir import expr as ex, loop_ir
from lamina.core.target import Target
from lamina.plugins.fusion import analysis
from lamina.plugins.schedules.attention.decode import tiling
from lamina.plugins.schedules.attention.decode.recognise import analyse
from lamina.plugins.schedules.attention.fuse_attention import values_reading_the_softmax
from lamina.plugins.schedules.attention.loops import NotAttention
from lamina.plugins.schedules.contraction import Contraction
from lamina.plugins.schedules.contraction.recognise import outer_loads
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest
from lamina.plugins.schedules.matmul_row_reduction import computed_where_read


def _sum(kernel: loop_ir.Kernel) -> Contraction | None:
    """``kernel`` as a sum over a reduction loop for each point of its parallel loops, stored
    by each point (the column ``n`` the last index of the first store), or None."""
    loops, inner = split_parallel_nest(kernel.body)
    if not loops or len(inner) < 3:
        return None
    init, reduce_loop, *stores = inner
    if not (isinstance(init, loop_ir.Init) and isinstance(reduce_loop, loop_ir.Loop) and reduce_loop.kind == "reduce"
            and len(reduce_loop.body) == 1 and all(isinstance(s, loop_ir.Store) for s in stores)):
        return None
    accumulate = reduce_loop.body[0]
    if not (isinstance(accumulate, loop_ir.Accumulate) and accumulate.acc == init.acc and accumulate.op == "sum"):
        return None
    parallel = [loop.var for loop in loops]
    last = stores[0].index[-1] if stores[0].index else None
    if not (isinstance(last, ex.Var) and last.name in parallel):
        return None
    rows = [v for v in parallel if v != last.name]
    extents = {loop.var: loop.extent for loop in loops} | {reduce_loop.var: reduce_loop.extent}
    return Contraction(kernel=kernel, extents=extents, m=rows[-1] if rows else last.name, n=last.name,
                       batch=rows[:-1], reduce_var=reduce_loop.var, acc=init.acc, acc_dtype=init.value.dtype,
                       init=init.value, value=accumulate.value, epilogue=stores, operands=())


def _reading(buffer: str):
    """``describe`` for ``values_reading_the_softmax``: the sum, and its read of ``buffer``."""

    def describe(kernel: loop_ir.Kernel) -> tuple[Contraction, loop_ir.Load] | None:
        c = _sum(kernel)
        if c is None:
            return None
        reads = [load for load in outer_loads(c.value) if load.buffer == buffer]
        return (c, reads[0]) if len(reads) == 1 else None

    return describe


def fuse_chains(program: loop_ir.Program, takes: Callable[[loop_ir.Kernel, list[loop_ir.Kernel]], bool],
                scores_in_the_softmax: bool = False) -> loop_ir.Program | None:
    """``program`` with its chains of attention kernels each as one (the values' sum computing the
    softmax, each loop over the keys its scores) where ``takes`` accepts the fused kernel in place of
    the kernels it replaces (it returns whether it gains, and raises ``NotAttention`` or
    ``ScheduleError`` where its schedule cannot run it), else None. A chain is a
    product's scores, their softmax and the probabilities times the values, each written for the
    next alone; with ``scores_in_the_softmax``, also a softmax that computes its scores itself
    (``matmul_row_reduction``'s kernel) and the values. After the first, every chain that touches
    nothing the ones before touched (the next layer's) is fused in the same call (``analysis.Untouched``)."""
    temporaries = {b.name for b in program.temporaries}
    known = analysis.buffers(program)
    kernels = program.kernels
    writers, readers = analysis.writers_and_readers(list(kernels))
    untouched = analysis.Untouched()

    def only_feeds(buffer: str, reader: int) -> int | None:
        """The kernel writing ``buffer`` where it is a temporary that kernel ``reader`` alone reads."""
        at = writers.get(buffer)
        if buffer not in temporaries or at is None or readers.get(buffer) != [reader]:
            return None
        return at if len(kernels[at].outputs) == 1 and untouched.holds(kernels[at]) else None

    def softmaxes(softmax_at: int) -> Iterator[tuple[list[int], loop_ir.Kernel]]:
        """(the kernels a fused one replaces besides the values', the softmax computing its scores)."""
        if scores_in_the_softmax:
            yield [softmax_at], kernels[softmax_at]
        for scores in analysis.loaded_buffers(kernels[softmax_at]):
            scores_at = only_feeds(scores, softmax_at)
            store = analysis.single_store(kernels[scores_at]) if scores_at is not None else None
            c = _sum(kernels[scores_at]) if store is not None else None
            computed = computed_where_read(c, store, kernels[softmax_at]) if c is not None else None
            if computed is not None:
                yield [scores_at, softmax_at], computed

    def fused_chain(position: int) -> tuple[loop_ir.Kernel, list[int]] | None:
        """The values' kernel at ``position`` fused with its chain, and the positions of the kernels
        it replaces besides its own; or None."""
        for probabilities in analysis.loaded_buffers(kernels[position]):
            softmax_at = only_feeds(probabilities, position)
            if softmax_at is None:
                continue
            for replaced, softmax in softmaxes(softmax_at):
                fused = values_reading_the_softmax(softmax, kernels[position], _reading(probabilities))
                if fused is None:
                    continue
                fused = analysis.renumbered(analysis.with_exact_inputs(fused, known))
                try:
                    if takes(fused, [kernels[i] for i in (*replaced, position)]):
                        return fused, replaced
                except (NotAttention, ScheduleError):
                    continue
        return None

    result: list[loop_ir.Kernel | None] = list(kernels)
    dropped: set[str] = set()
    for position, values_kernel in enumerate(kernels):
        if _sum(values_kernel) is None or not untouched.holds(values_kernel):
            continue
        found = fused_chain(position)
        if found is None:
            continue
        fused, replaced = found
        untouched.touch(*(kernels[i] for i in (*replaced, position)))
        dropped |= {b.name for i in replaced for b in kernels[i].outputs}
        result[position] = fused
        for i in replaced:
            result[i] = None
    if not untouched:
        return None
    return analysis.with_kernels(program, result, dropped)


class FuseDecodeAttention:
    name = "fuse_decode_attention"
    priority = 6
    """Beside ``fuse_attention``, which takes 64 queries or more, where this takes at most 16 rows."""
    knob_namespace = tiling.SCHEDULE_NAME
    knob_names = tiling.KNOB_NAMES

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        if target.compute_capability < tiling.MIN_ARCH:
            return None
        def takes(fused: loop_ir.Kernel, replaced: list[loop_ir.Kernel]) -> bool:
            """A decoding step's few queries: the fused kernel reads the cache once, where the kernels
            apart each read it (and write the scores): it gains wherever it runs."""
            tiling.choose(analyse(fused), target, knobs)
            return True

        return fuse_chains(program, takes)

"""Inline pointwise producers into their consumers.

A kernel that computes one value per point of its output, with no reduction, is
cheap to recompute: every load of its buffer becomes its stored value at the loaded
point, and the producer and its buffer disappear. This is what removes broadcasts,
views and chains of elementwise ops from memory. A producer whose buffer is a program
output stays, and so does anything containing a reduction, which would otherwise be
recomputed for every use, and so does a value that several kernels read and that
combines several temporaries (``analysis.worth_storing``): it is written once. A
producer that would make a consumer too large (see
``analysis.MAX_EXPRESSION_NODES``) stays too, and so does a gather (an embedding
lookup) read by several kernels or as a matmul's operand: the lookup is written once
rather than copied into each reader, where it would cost a dependent load and make the
operand one that a matmul cannot stage tile by tile. An expensive value (an exponential, a
division by a variable) that a view broadcasts over more than a few dozen points, as a matmul's
operand is broadcast over its output columns, is stored once: a transformer's
``silu(gate) * up``, which its down projection would otherwise recompute for every column,
and attention's probabilities, for every column of a head. So is an expensive value that its
readers together would compute at more than a few dozen points for each of its elements: a
model's rotary embedding, whose cosines and sines every layer's query and key rotations read
for each of their heads.
A value that reads one buffer at several points (RoPE's rotation) is stored before a
matmul reads it, for the same reason as a lookup. On Hopper a 16-bit matmul operand is stored
too (a normalisation before a projection), so that the TMA can copy it.
"""

from __future__ import annotations

from typing import Any, Mapping


from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes
from lamina.core.target import Target
from lamina.plugins.fusion import analysis

TMA_COMPUTE_CAPABILITY = 90
"""Hopper, whose 16-bit matmuls copy their operands with the TMA (``contraction/wgmma_tma``)."""
RECOMPUTED_POINTS_WORTH_A_LAUNCH = 1 << 20
"""Expensive values (a cosine: a few dozen instructions) that the GPU recomputes in about the time of
a kernel launch: fewer than this are cheaper to recompute in their readers than to store."""
TMA_MIN_ROWS = 64
"""The TMA's matmuls compute 64 rows at least: a decoding step's operand (one row), or a value
broadcast over fewer than 64 points (an attention mask over heads), stays inlined."""


class InlinePointwiseProducers:
    name = "inline_pointwise_producers"
    priority = 200

    def apply(self, program: loop_ir.Program, target: Target, knobs: Mapping[str, Any]) -> loop_ir.Program | None:
        outputs = {b.name for b in program.outputs}
        temporaries = {b.name: b for b in program.temporaries}
        known = analysis.buffers(program)
        kernels: list[loop_ir.Kernel | None] = list(program.kernels)  # None: a producer inlined
        readers = _Readers(kernels)
        inlined: set[str] = set()
        for position, kernel in enumerate(kernels):
            producer = analysis.pointwise(kernel) if kernel is not None else None
            buffer = producer.store.buffer if producer else None
            consumers = [] if buffer is None or buffer in outputs else readers.after(buffer, position)
            if not consumers or _keeps_lookup(producer, [kernels[later] for later in consumers]) or _keeps_costly_operand(
                producer, [kernels[later] for later in consumers]
            ) or _keeps_widely_read_costly_value(
                producer, [kernels[later] for later in consumers]
            ) or _keeps_tma_operand(
                producer, [kernels[later] for later in consumers], temporaries, target
            ) or analysis.worth_storing(
                producer, len(consumers), temporaries
            ) or not all(
                analysis.copies_fit(kernels[later], buffer, producer.store.value) for later in consumers
            ):
                continue
            for later in consumers:
                kernels[later] = analysis.with_exact_inputs(analysis.inline_producer(kernels[later], producer), known)
                readers.update(later, kernels[later])
            kernels[position] = None
            readers.update(position, None)
            inlined.add(buffer)
        if not inlined:
            return None
        return analysis.with_kernels(program, kernels, inlined)


class _Readers:
    """The positions of the kernels that read each buffer, kept as kernels change: a model's
    thousands of kernels are not searched for the readers of each producer."""

    def __init__(self, kernels: list[loop_ir.Kernel | None]):
        self._reads: list[set[str]] = [set() for _ in kernels]
        self._readers: dict[str, set[int]] = {}
        for position, kernel in enumerate(kernels):
            self.update(position, kernel)

    def after(self, buffer: str, position: int) -> list[int]:
        """The positions after ``position`` of the kernels that read ``buffer``, in order."""
        return sorted(later for later in self._readers.get(buffer, ()) if later > position)

    def update(self, position: int, kernel: loop_ir.Kernel | None) -> None:
        """The kernel at ``position`` is now ``kernel`` (None: gone)."""
        reads = set(analysis.loaded_buffers(kernel)) if kernel is not None else set()
        for name in self._reads[position] - reads:
            self._readers[name].discard(position)
        for name in reads - self._reads[position]:
            self._readers.setdefault(name, set()).add(position)
        self._reads[position] = reads


def _keeps_tma_operand(producer: analysis.Pointwise, consumers: list[loop_ir.Kernel],
                       temporaries: Mapping[str, loop_ir.Buffer], target: Target) -> bool:
    """A 16-bit matmul operand on Hopper: the TMA copies operands from memory as they are, so a
    value computed inside the matmul's loads (a normalisation before a projection) would keep
    it off the tensor cores, where writing the value once costs a pass over the operand."""
    buffer = temporaries.get(producer.store.buffer)
    if target.compute_capability != TMA_COMPUTE_CAPABILITY or buffer is None \
            or buffer.type.dtype not in (dtypes.bfloat16, dtypes.float16) \
            or sizes.hint(sizes.numel(buffer.type.shape[:-1])) < TMA_MIN_ROWS or copies_along_its_rows(producer):
        return False
    return any(_broadcasts(k, buffer.name) and analysis.reads_per_element(k, buffer.name) >= TMA_MIN_ROWS
               for k in consumers)


def copies_along_its_rows(producer: analysis.Pointwise) -> bool:
    """Whether the producer copies a buffer along the same contiguous axis: its readers may read
    the source itself, as the TMA would read the copy. (A copy that transposes is kept: the
    contraction schedule stores an operand K-major so, ``store_tma_operands_k_major``.)"""
    value = producer.store.value
    if not isinstance(value, loop_ir.Load) or not producer.loops or not value.index:
        return False
    last = producer.loops[-1].var
    return index.affine(value.index[-1]).terms.get(ex.Var(last)) == 1 \
        and last not in set().union(*(ex.free_vars(i) for i in value.index[:-1]))


def _keeps_lookup(producer: analysis.Pointwise, consumers: list[loop_ir.Kernel]) -> bool:
    if not analysis.gathers(producer.store.value):
        return False
    return len(consumers) > 1 or any(analysis.shared_in_reduction(k, producer.store.buffer) for k in consumers)


def _keeps_costly_operand(producer: analysis.Pointwise, consumers: list[loop_ir.Kernel]) -> bool:
    """An expensive value that a matmul, or the view that becomes its operand, broadcasts over
    many points; a reader that computes with it pointwise keeps it inlined. A value that
    reads one buffer at several points is never a matmul's operand: each of its loads would
    be staged as a tile of its own."""
    buffer = producer.store.buffer
    if analysis.reads_at_several_points(producer.store.value) and any(
        _broadcasts(k, buffer) and analysis.replication(k, buffer) > 1 for k in consumers
    ):
        return True
    if not analysis.expensive(producer.store.value):
        return False
    return any(_broadcasts(k, buffer) and analysis.replication(k, buffer) > analysis.RECOMPUTE_LIMIT for k in consumers)


def _keeps_widely_read_costly_value(producer: analysis.Pointwise, consumers: list[loop_ir.Kernel]) -> bool:
    """An expensive value that its readers together would recompute at more than
    ``RECOMPUTE_LIMIT`` points for each of its elements. A model's rotary embedding computes a
    cosine and a sine per position and feature; inlined, every layer's query and key rotations
    computed them again for each of their heads (TinyLlama: 22 layers of 32 and 4 heads,
    ``experiments/rotary_tables/``). Stored, they are computed once and read from L2. A decoding step's few values stay inlined: recomputing
    them costs less than the launch of a kernel that stores them."""
    if not analysis.expensive(producer.store.value):
        return False
    replicated = sum(analysis.replication(k, producer.store.buffer) for k in consumers)
    points = sizes.hint(sizes.numel(analysis.producer_shape(producer)))
    return replicated > analysis.RECOMPUTE_LIMIT and points * replicated > RECOMPUTED_POINTS_WORTH_A_LAUNCH


def _broadcasts(kernel: loop_ir.Kernel, buffer: str) -> bool:
    """Whether ``kernel`` is a view of ``buffer`` or a reduction that takes it as a shared operand."""
    if analysis.shared_in_reduction(kernel, buffer):
        return True
    view = analysis.pointwise(kernel)
    if view is None:
        return False
    value = view.store.value
    while isinstance(value, ex.Op) and value.op == "cast":
        value = value.args[0]
    return isinstance(value, loop_ir.Load) and value.buffer == buffer

"""A contraction block's copies of its operands' k-tiles into shared memory, written as Kernel IR.

Every thread copies elements ``tid + round * threads`` of each staged k-tile, in the order
``copy_layout`` chose, zero-filled outside the tensors (by ``cp.async``'s predicate, or a
store of zero): all of them at once, committed as one group, or spread over the first steps of
k of the k-tile before (``spread``, the order ``copy_issue`` gives).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from lamina.core.ir import expr as ex, index, kernel_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.contraction import copy_issue, copy_layout, tiling
from lamina.plugins.schedules.contraction.layout import BlockLayout, all_of, below

StagedPosition = Callable[[str, Expr, int], Expr]
"""The block's row (side ``"m"``) or column (``"n"``) that a staged tile's position across its
k-tile holds, given the block tile's rows."""


def same_position(side: str, staged: Expr, block_rows: int) -> Expr:
    """Staged rows in the block's own order."""
    return staged


class SharedCopies:
    """The copies of the ``stages`` of a block laid out as ``layout``: ``round_`` numbers a
    thread's copies, ``ranges`` bounds the kernel's variables, ``k_axis`` is the staged tiles'
    axis along k, and ``staged_position`` places their rows. ``masks`` gives, by a stage's
    operand text, a Loop IR condition outside which the stage holds zeros."""

    def __init__(self, layout: BlockLayout, stages: tuple[tile_ir.SharedStage, ...], round_: ex.Var,
                 ranges: index.Ranges, k_axis: int, staged_position: StagedPosition,
                 masks: Mapping[str, Expr] | None = None):
        self.layout, self.stages, self.round, self.ranges = layout, stages, round_, ranges
        self.k_axis, self.staged_position = k_axis, staged_position
        self.masks = dict(masks or {})

    @property
    def asynchronous(self) -> bool:
        return any(s.copy == "cp.async" for s in self.stages)

    @property
    def buffers(self) -> int:
        return self.stages[0].buffers

    def issue(self, kt: Expr, slot: Expr) -> list[kernel_ir.Stmt]:
        """All the copies of k-tile ``kt`` into buffer ``slot``, then their commit."""
        out = [s for stage in self.stages for s in self._copy_stage(stage, kt, slot)]
        if self.asynchronous:
            out.append(kernel_ir.CpAsyncCommit())
        return out

    def wait(self, pending: int) -> list[kernel_ir.Stmt]:
        """Wait until at most ``pending`` groups of copies are in flight."""
        return [kernel_ir.CpAsyncWait(pending)] if self.asynchronous else []

    def spread(self, kt: Expr, slot: Expr, steps: int) -> list[kernel_ir.Stmt]:
        """The copies of k-tile ``kt`` into ``slot``, round by round, each at the step of k
        that ``copy_issue`` gives it among the first ``steps``, and the commit after the
        last: statements for the start of every step of the k-tile before."""
        rounds = [self._copy_round(stage, kt, slot, ex.const(r))
                  for stage in self.stages for r in range(self._rounds(stage))]
        at: dict[int, list[kernel_ir.Stmt]] = {}
        for i, copy in enumerate(rounds):
            at.setdefault(copy_issue.step_of_copy(i, len(rounds), steps), []).extend(copy)
        at[max(at)].append(kernel_ir.CpAsyncCommit())
        return [kernel_ir.If(ex.op("eq", self.layout.kk, step), copies) for step, copies in sorted(at.items())]

    def _copy_stage(self, stage: tile_ir.SharedStage, kt: Expr, slot: Expr) -> list[kernel_ir.Stmt]:
        """Every thread copies elements ``tid + round * threads`` of the stage's k-tile ``kt``."""
        rounds = self._rounds(stage)
        if rounds == 1:
            return self._copy_round(stage, kt, slot, ex.const(0))
        return [kernel_ir.For(self.round.name, ex.const(0), ex.const(rounds), 1,
                              self._copy_round(stage, kt, slot, self.round), unroll=True)]

    def _rounds(self, stage: tile_ir.SharedStage) -> int:
        order = tiling.copy_order(self.layout.contraction, stage)
        return math.ceil(copy_layout.copies(order, stage.tile) / self.layout.threads)

    def _copy_round(self, stage: tile_ir.SharedStage, kt: Expr, slot: Expr, round_: Expr) -> list[kernel_ir.Stmt]:
        """Each thread's copy of element ``tid + round_ * threads`` of the stage's k-tile ``kt``."""
        w = self.layout
        c = w.contraction
        operand = c.operand(stage.index)
        order = tiling.copy_order(c, stage)
        count = copy_layout.copies(order, stage.tile)
        rounds = self._rounds(stage)
        e = w.tid + round_ * w.threads if rounds > 1 else w.tid
        ranges = {**self.ranges, self.round.name: rounds}
        layout = copy_layout.coordinates(order, stage.tile, e)
        coords = tuple(index.simplify(x, ranges) for x in layout)
        k = kt * w.block_k + coords[self.k_axis]
        env = {**w.batch_env, c.reduce_var: k}
        guards = [w.k_guard(k, ranges)]
        if len(coords) == 2:
            binding = w.rows if operand.side == "m" else w.cols
            block = w.block_row if operand.side == "m" else w.block_col
            staged = self.staged_position(operand.side, coords[1 - self.k_axis], w.rows.block_tile)
            position = block * binding.block_tile + staged
            env[stage.dims[1 - self.k_axis]] = position
            if binding.extent % binding.block_tile:
                guards.append(below(position, binding.extent, ranges))
        if stage.index in self.masks:
            guards.append(loop_to_kernel.translate_expr(self.masks[stage.index], c.kernel, env))
        source = loop_to_kernel.translate_expr(operand.load, c.kernel, env)
        copy = self._copy_element(stage, (slot, *coords), source, all_of(guards))
        if count % w.threads:
            copy = [kernel_ir.If(ex.op("lt", e, count), copy)]
        return copy

    def _copy_element(self, stage: tile_ir.SharedStage, dst_index: tuple[Expr, ...], source: kernel_ir.Load,
                      predicate: Expr | None) -> list[kernel_ir.Stmt]:
        name = self.layout.tiles[stage.index]
        if stage.copy == "cp.async":
            return [kernel_ir.CpAsync(name, dst_index, source.array, source.index, stage.copy_bytes, predicate)]
        store = kernel_ir.Store(name, dst_index, source)
        if predicate is None:
            return [store]
        zero = kernel_ir.Store(name, dst_index, ex.cast(ex.const(0), stage.dtype))
        return [kernel_ir.If(predicate, (store,), (zero,))]

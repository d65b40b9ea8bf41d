"""The registers that hold each of a thread's rows' reductions, and the reciprocals of those
that the stores divide by: one record, shared by the rows writer and the last block of each
block's rows (``last_block``)."""

from __future__ import annotations

import attrs

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.dtypes import DType
from lamina.plugins.schedules import loop_to_kernel


@attrs.frozen
class RowRegisters:
    """``registers``: the array of each row accumulator, a register per thread's row;
    ``reciprocals``: the array of ``1 / acc`` for each accumulator the stores divide by;
    ``accumulators``: each accumulator's combining op and dtype."""

    registers: dict[str, str]
    reciprocals: dict[str, str]
    accumulators: dict[str, tuple[str, DType]]

    def value(self, acc: str, a: int) -> kernel_ir.Load:
        """Accumulator ``acc`` of the thread's ``a``-th row."""
        return kernel_ir.Load(self.registers[acc], (ex.const(a),), self.accumulators[acc][1])

    def reciprocal(self, acc: str, a: int) -> kernel_ir.Load:
        return kernel_ir.Load(self.reciprocals[acc], (ex.const(a),), self.accumulators[acc][1])

    def combined(self, acc: str, op: str, a: int, value: ex.Expr) -> kernel_ir.Store:
        """``value`` combined by ``op`` into accumulator ``acc`` of row ``a``."""
        register = self.value(acc, a)
        return kernel_ir.Store(register.array, register.index, loop_to_kernel.combine(op, register, value))

    def environment(self, a: int) -> dict[str, ex.Expr]:
        """The accumulators and reciprocals of row ``a``, by the names the stores read them."""
        env: dict[str, ex.Expr] = {acc: self.value(acc, a) for acc in self.registers}
        env.update({name: self.reciprocal(acc, a) for acc, name in self.reciprocals.items()})
        return env

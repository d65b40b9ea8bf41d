"""The epilogue's reads of other buffers, issued before the products into registers.

An epilogue that adds a residual or multiplies by a gate reads one value of another buffer per
output. Read after the block's last k-tile, each thread's reads wait a trip to memory once the
products are done: TinyLlama's o-projection with its residual at 512 rows took nearly twice the
time of the product alone (``experiments/llama_products/``). Issued before the first
k-tile instead, into registers, the reads arrive while the tensor cores work, and the epilogue
reads registers. They cost a register per value, so a block takes them early only where they
fit beside its accumulators (``setting.early_read_registers``). A read the same for every row (a
bias) is soon in cache and stays in the epilogue.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, kernel_ir
from lamina.core.ir.expr import Expr


class EarlyReads:
    """The reads of input buffers at the outputs' rows that an epilogue's values make (those whose
    index holds ``row``), each given a register and issued, under the guard of its output, before
    the products; a read the same for every row (a bias) stays where it is."""

    def __init__(self, inputs: set[str], row: str, fresh):
        self.inputs, self.row, self.fresh = inputs, row, fresh
        self.names: dict[str, str] = {}
        """The register array of each buffer read."""
        self.slots: dict[tuple[kernel_ir.Load, Expr | None], tuple[str, int]] = {}
        self.sizes: dict[str, int] = {}
        self.dtypes: dict[str, object] = {}
        self.reads: list[kernel_ir.Stmt] = []

    def replaced(self, value: Expr, guard: Expr | None) -> Expr:
        """``value`` reading registers where it read an input; each new read recorded, to be issued
        where ``guard`` holds (the same read under two guards takes two registers)."""

        def swap(node: Expr) -> Expr | None:
            if not (isinstance(node, kernel_ir.Load) and node.array in self.inputs
                    and any(self.row in ex.free_vars(i) for i in node.index)):
                return None
            key = (node, guard)
            if key not in self.slots:
                name = self.names.setdefault(node.array, self.fresh(f"{node.array}_early"))
                slot = self.sizes.get(name, 0)
                self.sizes[name], self.dtypes[name] = slot + 1, node.dtype
                self.slots[key] = (name, slot)
                read = kernel_ir.Store(name, (ex.const(slot),), node)
                self.reads.append(kernel_ir.If(guard, [read]) if guard is not None else read)
            name, slot = self.slots[key]
            return kernel_ir.Load(name, (ex.const(slot),), node.dtype)

        return ex.transform(value, swap)

    def arrays(self) -> list[kernel_ir.Array]:
        return [kernel_ir.Array(name, self.dtypes[name], (size,), "register") for name, size in self.sizes.items()]

"""The decode schedule's two products on the tensor cores, for 16-bit keys and values.

A group's G query heads (at most 16) are the 16 rows of PTX's ``mma.sync`` m16n8k8 (the rows
past G zero). Each warp takes 8 keys at a time for the scores (the queries' 16 x depth against
the keys' depth x 8, one mma per 8 features of depth) and 8 features at a time for the output
(the probabilities' 16 x keys against the values' keys x 8, one mma per 8 keys), its output
accumulators held across the tiles and rescaled with the running sum, so that no warp adds
up another's. The tensor cores read tf32, in which bf16 and fp16 queries, keys, values and
probabilities (the program rounds them to the values' type) are exact; ``exact_in_tf32`` says
where the schedule may use them.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.loops import is_op

F32 = dtypes.float32
ROWS = 16
"""The mma's rows: the group's query heads, padded."""
STEP = 8
"""The mma's n and k: keys or features per product, depth or keys per step."""
QUAD = 4


def exact_in_tf32(query: Expr, keys: dtypes.DType, rounding: dtypes.DType | None) -> bool:
    """Whether tf32 holds the products' operands exactly: a query that is a 16-bit value
    widened, 16-bit keys and values, probabilities rounded to 16 bits."""
    sixteen_bits = (dtypes.bfloat16, dtypes.float16)
    return (is_op(query, "cast", 1) and query.args[0].dtype in sixteen_bits and keys in sixteen_bits
            and rounding in sixteen_bits)


class TensorCoreProducts:
    """The statements of both products for ``writer`` (a ``DecodeWriter``), lane ``4 g + t``
    of each warp holding rows ``g`` and ``g + 8`` of the mma's fragments."""

    def __init__(self, writer):
        self.w = writer
        d = writer.d
        self.g = writer.v["lane"] // QUAD
        self.t = writer.v["lane"] % QUAD
        self.feature_blocks = d.features // STEP
        self.blocks_per_warp = math.ceil(self.feature_blocks / writer.warps)

    def _in_rows(self, row: Expr) -> list[Expr]:
        """The rows of the lane's fragment that hold one of the group's rows."""
        return [] if self.w.group == ROWS else [ex.op("lt", row, self.w.group)]

    def _guarded(self, conditions: list[Expr], body: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        if not conditions:
            return body
        return [kernel_ir.If(conditions[0] if len(conditions) == 1 else ex.op("and", *conditions), body)]

    def _fragment_rows(self) -> list[tuple[int, Expr, int]]:
        """(accumulator element, row, column offset) of the lane's four accumulators; the rows
        past 8 only where the group has them."""
        g = self.g
        cells = [(0, g, 0), (1, g, 1)]
        if self.w.group > 8:
            cells += [(2, g + 8, 0), (3, g + 8, 1)]
        return cells

    # --- the scores ---------------------------------------------------------------

    def scores(self) -> list[kernel_ir.Stmt]:
        w, d, a = self.w, self.w.d, self.w.a
        v, n = w.v, w.n
        g, t = self.g, self.t
        key_blocks = w.keys // STEP
        accumulate = [(ex.const(i),) for i in range(4)]
        out: list[kernel_ir.Stmt] = []
        for round_ in range(math.ceil(key_blocks / w.warps)):
            block = v["warp"] + round_ * w.warps
            row_of_key = v["stage"] * w.keys + block * STEP + g
            steps: list[kernel_ir.Stmt] = []
            depth = v["part"] * STEP
            query = [w._load(n["q_rows"], (row, depth + t + k)) for row, k in ((g, 0), (g + 8, 0), (g, 4), (g + 8, 4))]
            key = [ex.cast(kernel_ir.Load(n["k_tile"], (row_of_key, depth + t + k), d.dtype), F32) for k in (0, 4)]
            steps.append(kernel_ir.MmaTf32(n["score_acc"], accumulate, query, key))
            body = [*(kernel_ir.Store(n["score_acc"], (ex.const(i),), ex.const(0.0, F32)) for i in range(4)),
                    kernel_ir.For(v["part"].name, ex.const(0), ex.const(d.depth // STEP), 1, steps, unroll=True)]
            for i, row, column in self._fragment_rows():
                key_at = block * STEP + 2 * t + column
                position = v["first_key"] + v["t"] * w.keys + key_at
                env = {**w._rows(row), a.key_var: position, a.dot_init.acc: w._load(n["score_acc"], (ex.const(i),))}
                score = ex.cast(loop_to_kernel.translate_expr(a.score, w.kernel, env), F32)
                if w._ragged():
                    score = ex.op("where", ex.op("lt", position, d.keys_extent), score, ex.const(-math.inf, F32))
                body += self._guarded(self._in_rows(row), [kernel_ir.Store(n["scores"], (row, key_at), score)])
            out += self._guarded([ex.op("lt", block, key_blocks)] if key_blocks % w.warps else [], body)
        return out

    # --- the output ---------------------------------------------------------------

    def _output_cells(self, j: int) -> list[tuple[int, Expr, Expr]]:
        """(accumulator, row, feature) of the lane's fragment of the warp's ``j``-th feature block."""
        w = self.w
        block = w.v["warp"] + j * w.warps
        return [(4 * j + i, row, block * STEP + 2 * self.t + column) for i, row, column in self._fragment_rows()]

    def _block_guard(self, j: int) -> list[Expr]:
        w = self.w
        block = w.v["warp"] + j * w.warps
        return [ex.op("lt", block, self.feature_blocks)] if self.feature_blocks % w.warps else []

    def values(self) -> list[kernel_ir.Stmt]:
        w, d = self.w, self.w.d
        v, n = w.v, w.n
        g, t = self.g, self.t
        out: list[kernel_ir.Stmt] = []
        for j in range(self.blocks_per_warp):
            cells = [(4 * j + i, row) for i, row in enumerate((g, g, g + 8, g + 8))]
            rescale = [kernel_ir.Store(n["out_acc"], (ex.const(i),), ex.op(
                "mul", w._load(n["out_acc"], (ex.const(i),)), w._load(n["rescale"], (row,)))) for i, row in cells]
            feature = (v["warp"] + j * w.warps) * STEP + g
            keys = v["part"] * STEP
            probabilities = [w._load(n["scores"], (row, keys + t + k)) for row, k in ((g, 0), (g + 8, 0), (g, 4),
                                                                                   (g + 8, 4))]
            values = [ex.cast(kernel_ir.Load(n["v_tile"], (v["stage"] * w.keys + keys + t + k, feature), d.dtype), F32)
                      for k in (0, 4)]
            step = kernel_ir.MmaTf32(n["out_acc"], [(ex.const(i),) for i, _ in cells], probabilities, values)
            body = [*rescale, kernel_ir.For(v["part"].name, ex.const(0), ex.const(w.keys // STEP), 1, [step],
                                            unroll=True)]
            out += self._guarded(self._block_guard(j), body)
        return out

    def each_output(self, visit) -> list[kernel_ir.Stmt]:
        """``visit(row, feature, unscaled sum)`` for each output the lane holds."""
        out: list[kernel_ir.Stmt] = []
        for j in range(self.blocks_per_warp):
            body: list[kernel_ir.Stmt] = []
            for i, row, feature in self._output_cells(j):
                body += self._guarded(self._in_rows(row), visit(row, feature, self.w._load(self.w.n["out_acc"],
                                                                                          (ex.const(i),))))
            out += self._guarded(self._block_guard(j), body)
        return out

    def arrays(self) -> list[kernel_ir.Array]:
        n = self.w.n
        return [kernel_ir.Array(n["score_acc"], F32, (4,), "register"),
                kernel_ir.Array(n["out_acc"], F32, (4 * self.blocks_per_warp,), "register")]

    def start(self) -> list[kernel_ir.Stmt]:
        """The output accumulators cleared; the padding rows' probabilities and rescaling zero."""
        w, n, v = self.w, self.w.n, self.w.v
        out = [kernel_ir.Store(n["out_acc"], (ex.const(i),), ex.const(0.0, F32)) for i in range(4 * self.blocks_per_warp)]
        if w.group == ROWS:
            return out
        pad_rows = ROWS - w.group
        width = w.keys + QUAD
        count = pad_rows * width
        row, column = w.group + v["i"] // width, v["i"] % width
        store = kernel_ir.Store(n["scores"], (row, column), ex.const(0.0, F32))
        body = [kernel_ir.Declare(v["i"].name, v["i"].dtype, v["j"] * w.threads + v["tid"]),
                *self._guarded([ex.op("lt", v["i"], count)] if count % w.threads else [], [store])]
        out.append(kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(count / w.threads)), 1, body))
        out += self._guarded([ex.op("lt", v["tid"], pad_rows)],
                             [kernel_ir.Store(n["rescale"], (w.group + v["tid"],), ex.const(0.0, F32))])
        return out

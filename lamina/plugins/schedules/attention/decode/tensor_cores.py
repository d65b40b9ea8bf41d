"""The decode schedule's products on the tensor cores: ``mma.sync`` m16n8k16 of 16-bit operands.

The group's G rows are the rows of the mma, padded with zeros to 16. For each key tile:

    scores: warp w takes the tile's keys w C/4 .. (w + 1) C/4 - 1, eight at a time:
        S[16][8] = Q[16][depth] K[8 keys][depth]^T, 16 features per mma, the queries' and keys'
        pairs read from shared memory as they lie (both along the depth); each lane puts the
        program's score of its four (row, key) elements of S, for the rows below G, in ``scores``
    softmax: as on the CUDA cores, the probabilities (rounded as the program rounds them) in
        place of the scores; the rows past G stay zero
    values: warp w takes the features w * 8, (w + 4) * 8, ...: its accumulators O[16][8] of each
        are first rescaled by their rows' factors, then O += P[16][16 keys] V[16 keys][8], for
        each 16 keys of the tile; P's pairs are two adjacent probabilities of a row, V's two
        values of a feature at adjacent keys

and at the end each warp writes its features of the rows below G to ``warp_out``. Lane ``4 g + t``
of a warp (``lane_group`` g, ``in_group`` t) holds the pieces that ``kernel_ir.Mma16`` lays out. The products
are exact (16-bit values, float32 sums), as the CUDA cores' are: only the order of the sums
differs. The queries and keys are read with rows padded by 16 bytes, so that the lanes of a warp
reach 32 different banks, and the probabilities with rows of ``C + 8`` floats
(``tiling.score_row_elements``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.ir.expr import Expr
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.decode import tiling

if TYPE_CHECKING:
    from lamina.plugins.schedules.attention.decode.writer import DecodeWriter

F32 = dtypes.float32
ROWS = tiling.MMA_ROWS
N = 8
"""Columns of an m16n8k16's output: keys for the scores, features for the output."""
K = 16
"""Its reduction: features for the scores, keys for the output."""


def _declare(name: str, value: Expr) -> kernel_ir.Declare:
    return kernel_ir.Declare(name, dtypes.index, value)


class TensorCorePhases:
    """The statements and arrays of the products on the tensor cores, for ``writer``'s kernel."""

    def __init__(self, writer: DecodeWriter):
        self.w = writer
        d = writer.d
        self.dtype = d.dtype
        self.keys_per_warp = writer.keys // writer.warps
        self.feature_tiles = d.features // N
        self.tiles_per_warp = math.ceil(self.feature_tiles / writer.warps)
        self.score_row = tiling.score_row_elements(writer.keys, "tensor_cores")

    # --- operands -----------------------------------------------------------------

    def _pair(self, array: str, first: tuple[Expr, Expr], second: tuple[Expr, Expr], dtype) -> kernel_ir.PackedPair:
        """Two elements of ``array`` packed into one 32-bit word of 16-bit values, ``first`` low."""
        return kernel_ir.PackedPair(ex.cast(kernel_ir.Load(array, first, dtype), F32),
                                    ex.cast(kernel_ir.Load(array, second, dtype), F32), self.dtype)

    def _along_rows(self, array: str, row: Expr, column: Expr, dtype) -> kernel_ir.PackedPair:
        return self._pair(array, (row, column), (row, column + 1), dtype)

    def _a(self, array: str, column: Expr, dtype) -> list[kernel_ir.PackedPair]:
        """A's four words of this lane: rows g and g + 8, columns 2t and 2t + 8 from ``column`` on."""
        g, t = self.w.v["lane_group"], self.w.v["in_group"]
        return [self._along_rows(array, g + 8 * (i % 2), column + 2 * t + 8 * (i // 2), dtype) for i in range(4)]

    # --- the phases ---------------------------------------------------------------

    def start(self) -> list[kernel_ir.Stmt]:
        """The group's query factors in 16 bits (the rows past G zero), the probabilities' rows past
        G and their factors zero for good, the accumulators cleared."""
        w, d = self.w, self.w.d
        v = w.v
        count = ROWS * d.depth
        g, r = v["i"] // d.depth, v["i"] % d.depth
        value = loop_to_kernel.translate_expr(d.query, w.kernel, {**w._rows(g), w.a.dot_loop.var: r})
        store = kernel_ir.If(ex.op("lt", g, d.group_rows),
                             [kernel_ir.Store(w.n["q_rows"], (g, r), ex.cast(value, self.dtype))],
                             [kernel_ir.Store(w.n["q_rows"], (g, r), ex.const(0.0, self.dtype))])
        body = [_declare(v["i"].name, v["j"] * tiling.THREADS + v["tid"]), store]
        padding = ROWS - d.group_rows
        zero_rows = padding * self.score_row
        zeros = [_declare(v["i"].name, v["j"] * tiling.THREADS + v["tid"]), kernel_ir.If(
            ex.op("lt", v["i"], zero_rows), [kernel_ir.Store(w.n["scores"], (
                d.group_rows + v["i"] // self.score_row, v["i"] % self.score_row), ex.const(0.0, F32))])]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(count // tiling.THREADS), 1, body),
                kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(zero_rows / tiling.THREADS)), 1, zeros),
                kernel_ir.If(ex.op("lt", v["tid"], padding), [
                    kernel_ir.Store(w.n["rescale"], (d.group_rows + v["tid"],), ex.const(0.0, F32))]),
                *(kernel_ir.Store(w.n["o_acc"], (ex.const(i),), ex.const(0.0, F32))
                  for i in range(4 * self.tiles_per_warp))]

    def lane_coordinates(self) -> list[kernel_ir.Stmt]:
        v = self.w.v
        return [_declare(v["lane_group"].name, v["lane"] // 4), _declare(v["in_group"].name, v["lane"] % 4)]

    def scores(self) -> list[kernel_ir.Stmt]:
        w, d = self.w, self.w.d
        v, n, a = w.v, w.n, w.a
        g, t = v["lane_group"], v["in_group"]
        out: list[kernel_ir.Stmt] = []
        for j in range(self.keys_per_warp // N):
            first = v["warp"] * self.keys_per_warp + j * N
            row_of_keys = v["stage"] * w.keys + first + g
            step = v["k_step"] * K
            b = [self._along_rows(n["k_tile"], row_of_keys, step + 2 * t + 8 * i, self.dtype) for i in range(2)]
            mma = kernel_ir.Mma16(n["s_acc"], [(ex.const(e),) for e in range(4)],
                                  self._a(n["q_rows"], step, self.dtype), b, self.dtype)
            out += [*(kernel_ir.Store(n["s_acc"], (ex.const(e),), ex.const(0.0, F32)) for e in range(4)),
                    kernel_ir.For(v["k_step"].name, ex.const(0), ex.const(d.depth // K), 1, [mma], unroll=True)]
            for e in range(4):
                row, key = g + 8 * (e // 2), first + 2 * t + e % 2
                position = v["first_key"] + v["t"] * w.keys + key
                env = {**w._rows(row), a.key_var: position,
                       a.dot_init.acc: kernel_ir.Load(n["s_acc"], (ex.const(e),), F32)}
                score = ex.cast(loop_to_kernel.translate_expr(a.score, w.kernel, env), F32)
                if w._ragged():
                    score = ex.op("where", ex.op("lt", position, d.keys_extent), score, ex.const(-math.inf, F32))
                out.append(kernel_ir.If(ex.op("lt", row, d.group_rows), [kernel_ir.Store(n["scores"], (row, key),
                                                                                         score)]))
        return out

    def values(self) -> list[kernel_ir.Stmt]:
        w = self.w
        v, n = w.v, w.n
        g, t = v["lane_group"], v["in_group"]
        out: list[kernel_ir.Stmt] = []
        for i in range(self.tiles_per_warp):
            feature = (v["warp"] + w.warps * i) * N + g
            keys = v["stage"] * w.keys + v["k_step"] * K + 2 * t
            b = [self._pair(n["v_tile"], (keys + 8 * h, feature), (keys + 8 * h + 1, feature), self.dtype)
                 for h in range(2)]
            places = [(ex.const(4 * i + e),) for e in range(4)]
            body = [*self._rescaled(places),
                    kernel_ir.For(v["k_step"].name, ex.const(0), ex.const(w.keys // K), 1, [kernel_ir.Mma16(
                        n["o_acc"], places, self._a(n["scores"], v["k_step"] * K, F32), b, self.dtype)], unroll=True)]
            if (i + 1) * w.warps > self.feature_tiles:  # the warps past the last features skip the round
                body = [kernel_ir.If(ex.op("lt", v["warp"] + w.warps * i, self.feature_tiles), body)]
            out += body
        return out

    def _rescaled(self, places: list[tuple[Expr]]) -> list[kernel_ir.Stmt]:
        """The output accumulators at ``places`` (rows g and g + 8) times their rows' factors: the
        online softmax's rescaling, before the tile's keys add to them."""
        n, g = self.w.n, self.w.v["lane_group"]
        factors = [kernel_ir.Load(n["rescale"], (g + 8 * (e // 2),), F32) for e in range(len(places))]
        return [kernel_ir.Store(n["o_acc"], place, ex.op("mul", kernel_ir.Load(n["o_acc"], place, F32), factor))
                for place, factor in zip(places, factors)]

    def warp_sums(self) -> list[kernel_ir.Stmt]:
        """Each warp's features of the rows below G to ``warp_out``."""
        w, d = self.w, self.w.d
        v, n = w.v, w.n
        g, t = v["lane_group"], v["in_group"]
        out: list[kernel_ir.Stmt] = []
        for i in range(self.tiles_per_warp):
            tile = v["warp"] + w.warps * i
            stores = []
            for e in range(4):
                row = g + 8 * (e // 2)
                value = kernel_ir.Load(n["o_acc"], (ex.const(4 * i + e),), F32)
                stores.append(kernel_ir.If(ex.op("lt", row, d.group_rows), [
                    kernel_ir.Store(n["warp_out"], (ex.const(0), row, tile * N + 2 * t + e % 2), value)]))
            out += [kernel_ir.If(ex.op("lt", tile, self.feature_tiles), stores)] \
                if (i + 1) * w.warps > self.feature_tiles else stores
        return out

    def arrays(self) -> list[kernel_ir.Array]:
        w, d = self.w, self.w.d
        n = w.n
        return [
            kernel_ir.Array(n["q_rows"], self.dtype, (ROWS, tiling.padded(d, d.depth)), "shared"),
            kernel_ir.Array(n["scores"], F32, (ROWS, self.score_row), "shared"),
            kernel_ir.Array(n["rescale"], F32, (ROWS,), "shared"),
            kernel_ir.Array(n["warp_out"], F32, (1, d.group_rows, d.features), "shared"),
            kernel_ir.Array(n["s_acc"], F32, (4,), "register"),
            kernel_ir.Array(n["o_acc"], F32, (4 * self.tiles_per_warp,), "register"),
        ]

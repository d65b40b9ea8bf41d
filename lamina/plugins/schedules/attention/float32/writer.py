"""The Kernel IR of the float32 attention schedule: FlashAttention-2's loop on ``mma.sync``.

Block ``(x, y)`` takes queries ``x B .. x B + B - 1`` of group ``y`` (``B = block_queries``),
warp ``w`` of it the 16 queries from ``16 w``; lane ``4 g + t`` holds rows ``g`` and ``g + 8``
of its warp's, as an m16n8k8 accumulator lays them out::

    stage the block's queries, each split into its nearest tf32 (big) and the rest (small)
    cp.async the first S - 1 key tiles' keys and values into a ring of S stages
    for each key tile (up to the last that a query of the block sees, where causal):
        cp.async the tile S - 1 later into the stage the tile before used; wait for this one
        scores S[16][C] = Q K^T: per 8 keys and 8 features, the key's pieces split in registers,
            three mma (small by big, big by small, big by big) summed from zero, then added
        each score as the program computes it (scale, mask), keys past the last -inf; per row,
            the running maximum raised to the tile's (the four lanes of a row agree by two
            shuffles), the output and the lane's part of the running sum rescaled, p = exp(s - m)
        output O[16][F] += P V: the probabilities are the A fragments of the next product where
            they lie, with the keys in the order an accumulator holds them (lane t's k and k + 4
            are the keys 2t and 2t + 1 of each 8), so the values are read in that order
    the four lanes of a row add up their sums; out = O / l through the program's epilogue

A float32 product as three tf32 products is within about 2^-21 of the float32 one
(``contraction.mma_sync.products`` says why each step is summed from zero and added in
float32). ``mma.sync`` rather than ``wgmma``: tf32 wgmma reads its shared-memory operands
only K-major, so the values would need a transposed copy, and its register A fragment is not
the scores' accumulator layout; ``mma.sync`` takes each lane's fragments as the lane reads them.
Queries past the last of a group compute with the last one's row (their results not stored),
keys past the last with zeros, scored -inf.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.float32 import tiling
from lamina.plugins.schedules.attention.float32.recognise import PromptAttention, analyse
from lamina.plugins.schedules.attention.writer import balanced_tree
from lamina.plugins.schedules.contraction.layout import KernelNames, dynamic_shared_bytes
from lamina.plugins.schedules.contraction.mma_sync.products import big_piece

F32 = dtypes.float32
N = 8
"""Columns of an m16n8k8's output, and its k: keys for the scores, features for the output."""
VECTOR = tiling.COPY_BYTES // 4
SIZES = (("small", "big"), ("big", "small"), ("big", "big"))
"""The three tf32 products of a float32 one, the small ones first."""


def _declare(name: str, value: Expr, dtype=dtypes.index) -> kernel_ir.Declare:
    return kernel_ir.Declare(name, dtype, value)


class Float32AttentionWriter:
    def __init__(self, tile: tile_ir.TileKernel, p: PromptAttention):
        self.p, self.a, self.kernel = p, p.loops, p.kernel
        self.block_queries = tile.settings.block_queries
        self.keys = tile.reduction.step
        self.stages = tile.stages[0].buffers
        self.threads = tile.settings.threads
        self.all_tiles = math.ceil(p.keys_extent / self.keys)
        self.key_chunks = self.keys // N
        self.feature_chunks = p.features // N
        self.depth_row, self.feature_row = tiling.padded(p.depth), tiling.padded(p.features)
        """Staged rows of queries and keys, and of values, padded against bank conflicts."""
        a = self.a
        loop_vars = {loop.var for loop in a.rows} | {a.key_var, a.dot_loop.var, a.values_loop.var,
                                                     a.feature_loop.var}
        names = KernelNames({b.name for b in self.kernel.inputs + self.kernel.outputs} | loop_vars
                            | {a.dot_init.acc, a.output_acc, a.maximum, a.total})
        self.v = {n: ex.Var(names.fresh(n)) for n in (
            "tid", "lane", "warp", "lane_group", "in_group", "group", "first_query", "tiles", "t", "stage", "i", "j",
            "k_step")}
        self.f = {n: ex.Var(names.fresh(n), F32)
                  for n in ("tile_max", "new_max", "max_used", "rescale", "query_big")}
        self.n = {n: names.fresh(n) for n in (
            "q_big", "q_small", "k_tile", "v_tile", "scores", "small_probabilities", "out", "running_max",
            "running_sum", "a_big", "a_small", "b_big", "b_small", "step_sum")}

    # --- helpers ----------------------------------------------------------------

    def _reg(self, name: str, *at: int | Expr) -> kernel_ir.Load:
        return kernel_ir.Load(self.n[name], tuple(ex.const(i) if isinstance(i, int) else i for i in at), F32)

    def _rows(self, query: Expr) -> dict[str, Expr]:
        """The row loops' variables at the block's query ``query``, past the group's last held at its last."""
        p = self.p
        at = ex.op("min", self.v["first_query"] + query, p.queries_extent - 1)
        return p.rows(self.v["group"], at)

    def _my_row(self, half: int) -> Expr:
        """The block's query of this lane's row ``half`` (0: g, 1: g + 8)."""
        return self.v["warp"] * tiling.WARP_ROWS + self.v["lane_group"] + 8 * half

    def _ragged_keys(self) -> bool:
        return self.all_tiles * self.keys != self.p.keys_extent

    def _split(self, raw: Expr, name: str, at: tuple) -> list[kernel_ir.Stmt]:
        """``raw`` into its big tf32 piece and what is left, in the registers ``name``_big and _small."""
        small, big = self.n[f"{name}_small"], self.n[f"{name}_big"]
        at = tuple(ex.const(i) if isinstance(i, int) else i for i in at)
        return [kernel_ir.Store(small, at, raw),
                kernel_ir.Store(big, at, big_piece(kernel_ir.Load(small, at, F32))),
                kernel_ir.Store(small, at, ex.op("sub", kernel_ir.Load(small, at, F32),
                                                 kernel_ir.Load(big, at, F32)))]

    def _three_products(self, accumulators: str, places: list[tuple[Expr, ...]], a_pieces, b_pieces
                        ) -> list[kernel_ir.Stmt]:
        """``accumulators`` at ``places`` += A B as three tf32 products summed from zero on the tensor
        cores, then added in float32. ``a_pieces(size)`` and ``b_pieces(size)`` give the fragments."""
        step = self.n["step_sum"]
        out: list[kernel_ir.Stmt] = [kernel_ir.Store(step, (ex.const(i),), ex.const(0.0, F32)) for i in range(4)]
        for a_size, b_size in SIZES:
            out.append(kernel_ir.MmaTf32(step, [(ex.const(i),) for i in range(4)], a_pieces(a_size),
                                         b_pieces(b_size)))
        out += [kernel_ir.Store(accumulators, place, ex.op("add", kernel_ir.Load(accumulators, place, F32),
                                                           self._reg("step_sum", i)))
                for i, place in enumerate(places)]
        return out

    # --- copies -----------------------------------------------------------------

    def _copies(self, tile: str, load, width: int, key_var: str, along: str, t: Expr) -> list[kernel_ir.Stmt]:
        """Key tile ``t``'s rows of ``load`` (keys or values) into its stage of ``tile``."""
        runs = width // VECTOR
        count = self.keys * runs
        key = self.v["i"] // runs
        part = self.v["i"] % runs
        position = t * self.keys + key
        env = {**self._rows(ex.const(0)), key_var: ex.op("min", position, self.p.keys_extent - 1),
               along: part * VECTOR}
        source = loop_to_kernel.translate_expr(load, self.kernel, env)
        copy = kernel_ir.CpAsync(tile, (t % self.stages * self.keys + key, part * VECTOR), source.array,
                                 source.index, tiling.COPY_BYTES,
                                 ex.op("lt", position, self.p.keys_extent) if self._ragged_keys() else None)
        body = [_declare(self.v["i"].name, self.v["j"] * self.threads + self.v["tid"]), copy]
        if count % self.threads:
            body = [body[0], kernel_ir.If(ex.op("lt", self.v["i"], count), [copy])]
        return [kernel_ir.For(self.v["j"].name, ex.const(0), ex.const(math.ceil(count / self.threads)), 1, body,
                              unroll=True)]

    def _tile_copies(self, t: Expr) -> list[kernel_ir.Stmt]:
        p, a = self.p, self.a
        return [*self._copies(self.n["k_tile"], p.keys, p.depth, a.key_var, a.dot_loop.var, t),
                *self._copies(self.n["v_tile"], p.values, p.features, a.values_loop.var, a.feature_loop.var, t)]

    def _queries(self) -> list[kernel_ir.Stmt]:
        """The block's query factors as the program computes them, split into tf32 pieces."""
        p, v = self.p, self.v
        count = self.block_queries * p.depth
        row, feature = v["i"] // p.depth, v["i"] % p.depth
        value = ex.cast(loop_to_kernel.translate_expr(p.query, self.kernel,
                                                      {**self._rows(row), self.a.dot_loop.var: feature}), F32)
        big = self.f["query_big"]
        body = [_declare(v["i"].name, v["j"] * self.threads + v["tid"]),
                kernel_ir.Declare(big.name, F32, big_piece(value)),
                kernel_ir.Store(self.n["q_big"], (row, feature), big),
                kernel_ir.Store(self.n["q_small"], (row, feature), ex.op("sub", value, big))]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(count // self.threads), 1, body)]

    # --- a key tile ---------------------------------------------------------------

    def _scores(self) -> list[kernel_ir.Stmt]:
        """S = Q K^T for the warp's 16 queries and the tile's keys, three tf32 products a step."""
        v, n, p = self.v, self.n, self.p
        g, t = v["lane_group"], v["in_group"]
        out: list[kernel_ir.Stmt] = [kernel_ir.Store(n["scores"], (ex.const(i),), ex.const(0.0, F32))
                                     for i in range(4 * self.key_chunks)]
        step: list[kernel_ir.Stmt] = []
        column = v["k_step"] * N + t
        for size in ("big", "small"):
            for i in range(4):
                row = v["warp"] * tiling.WARP_ROWS + g + 8 * (i % 2)
                step.append(kernel_ir.Store(n[f"a_{size}"], (ex.const(i),), kernel_ir.Load(
                    n[f"q_{size}"], (row, column + 4 * (i // 2)), F32)))
        for j in range(self.key_chunks):
            key = v["stage"] * self.keys + N * j + g
            for h in range(2):
                step += self._split(kernel_ir.Load(n["k_tile"], (key, column + 4 * h), F32), "b", (h,))
            step += self._three_products(
                n["scores"], [(ex.const(4 * j + e),) for e in range(4)],
                lambda size: [self._reg(f"a_{size}", i) for i in range(4)],
                lambda size: [self._reg(f"b_{size}", h) for h in range(2)])
        out.append(kernel_ir.For(v["k_step"].name, ex.const(0), ex.const(p.depth // N), 1, step, unroll=True))
        return out

    def _softmax(self) -> list[kernel_ir.Stmt]:
        """Each score as the program computes it; per row of the lane's two, the running maximum
        raised to the tile's, the output and the running sum rescaled, the probabilities in place."""
        v, f, n, a, p = self.v, self.f, self.n, self.a, self.p
        t = v["in_group"]
        out: list[kernel_ir.Stmt] = []
        for j in range(self.key_chunks):
            for e in range(4):
                position = v["t"] * self.keys + N * j + 2 * t + e % 2
                env = {**self._rows(self._my_row(e // 2)), a.key_var: ex.op("min", position, p.keys_extent - 1),
                       a.dot_init.acc: self._reg("scores", 4 * j + e)}
                score = ex.cast(loop_to_kernel.translate_expr(a.score, self.kernel, env), F32)
                if self._ragged_keys():
                    score = ex.op("where", ex.op("lt", position, p.keys_extent), score, ex.const(-math.inf, F32))
                out.append(kernel_ir.Store(n["scores"], (ex.const(4 * j + e),), score))
        minus_infinity = ex.const(-math.inf, F32)
        for half in range(2):
            cells = [4 * j + 2 * half + e for j in range(self.key_chunks) for e in range(2)]
            running = self._reg("running_max", half)

            def let(var: ex.Var, value: Expr) -> kernel_ir.Stmt:
                """``var = value``, declared in the first row's turn."""
                return kernel_ir.Declare(var.name, F32, value) if half == 0 else kernel_ir.Assign(var.name, value)

            out.append(let(f["tile_max"], balanced_tree("max", [self._reg("scores", c) for c in cells])))
            for mask in (1, 2):
                out.append(kernel_ir.Assign(f["tile_max"].name, ex.op(
                    "max", f["tile_max"], kernel_ir.ShuffleXor(f["tile_max"], mask))))
            out += [let(f["new_max"], ex.op("max", running, f["tile_max"])),
                    let(f["max_used"], ex.op("where", ex.op("eq", f["new_max"], minus_infinity), ex.const(0.0, F32),
                                             f["new_max"])),
                    let(f["rescale"], ex.op("exp", ex.op("sub", running, f["max_used"])))]
            out.append(kernel_ir.Store(n["running_max"], (ex.const(half),), f["new_max"]))
            for c in cells:
                out.append(kernel_ir.Store(n["scores"], (ex.const(c),), ex.op(
                    "exp", ex.op("sub", self._reg("scores", c), f["max_used"]))))
            total = ex.op("mul", self._reg("running_sum", half), f["rescale"])
            out.append(kernel_ir.Store(n["running_sum"], (ex.const(half),), ex.op(
                "add", total, balanced_tree("add", [self._reg("scores", c) for c in cells]))))
            for chunk in range(self.feature_chunks):
                for e in range(2):
                    at = 4 * chunk + 2 * half + e
                    out.append(kernel_ir.Store(n["out"], (ex.const(at),), ex.op(
                        "mul", self._reg("out", at), f["rescale"])))
        return out

    def _values(self) -> list[kernel_ir.Stmt]:
        """O += P V: per 8 keys, the probabilities' fragments as the scores' accumulators hold them
        (k = t and t + 4 the keys 2t and 2t + 1), split once, then three products per 8 features."""
        v, n = self.v, self.n
        g, t = v["lane_group"], v["in_group"]
        out: list[kernel_ir.Stmt] = []
        fragment = (0, 2, 1, 3)
        """A's pieces (rows g, g + 8 at k = t; rows g, g + 8 at k = t + 4) among an accumulator's four."""
        for c in range(self.key_chunks):
            for e in fragment:
                at = (ex.const(4 * c + e),)
                value = self._reg("scores", 4 * c + e)
                out += [kernel_ir.Store(n["small_probabilities"], at, ex.op("sub", value, big_piece(value))),
                        kernel_ir.Store(n["scores"], at, big_piece(value))]
            for chunk in range(self.feature_chunks):
                key = v["stage"] * self.keys + N * c + 2 * t
                feature = N * chunk + g
                for h in range(2):
                    out += self._split(kernel_ir.Load(n["v_tile"], (key + h, feature), F32), "b", (h,))
                pieces = {"big": n["scores"], "small": n["small_probabilities"]}
                out += self._three_products(
                    n["out"], [(ex.const(4 * chunk + e),) for e in range(4)],
                    lambda size, c=c: [kernel_ir.Load(pieces[size], (ex.const(4 * c + e),), F32) for e in fragment],
                    lambda size: [self._reg(f"b_{size}", h) for h in range(2)])
        return out

    # --- the kernel -------------------------------------------------------------

    def _tiles(self) -> Expr:
        """The key tiles the block walks: all, or those up to the last key its last query sees."""
        p = self.p
        last_query = ex.op("min", self.v["first_query"] + self.block_queries, p.queries_extent) - 1
        last = p.last_visible_key(last_query)
        tiles: Expr = ex.const(self.all_tiles)
        if last is not None:
            tiles = ex.op("max", ex.op("min", tiles, ex.op("max", last, -1) // self.keys + 1), 1)
        return tiles

    def _outputs(self) -> list[kernel_ir.Stmt]:
        """The four lanes of each row add up their sums; each lane's outputs through the epilogue."""
        v, n, a, p = self.v, self.n, self.a, self.p
        out: list[kernel_ir.Stmt] = []
        for half in range(2):
            for mask in (1, 2):
                total = self._reg("running_sum", half)
                out.append(kernel_ir.Store(n["running_sum"], (ex.const(half),),
                                           ex.op("add", total, kernel_ir.ShuffleXor(total, mask))))
        for half in range(2):
            stores: list[kernel_ir.Stmt] = []
            row = self._my_row(half)
            for chunk in range(self.feature_chunks):
                for e in range(2):
                    feature = N * chunk + 2 * v["in_group"] + e
                    value = a.divided(self._reg("out", 4 * chunk + 2 * half + e), self._reg("running_sum", half))
                    env = {**self._rows(row), a.feature_loop.var: feature, a.output_acc: value}
                    stores += loop_to_kernel.translate_body(a.stores, self.kernel, env)
            if p.queries_extent % self.block_queries:
                stores = [kernel_ir.If(ex.op("lt", v["first_query"] + row, p.queries_extent), stores)]
            out += stores
        return out

    def body(self) -> list[kernel_ir.Stmt]:
        v, n = self.v, self.n
        out: list[kernel_ir.Stmt] = [
            _declare(v["tid"].name, kernel_ir.thread_idx("x")),
            _declare(v["lane"].name, v["tid"] % kernel_ir.WARP_SIZE),
            _declare(v["warp"].name, v["tid"] // kernel_ir.WARP_SIZE),
            _declare(v["lane_group"].name, v["lane"] // 4),
            _declare(v["in_group"].name, v["lane"] % 4),
            _declare(v["group"].name, kernel_ir.block_idx("y") if self.p.groups else ex.const(0)),
            _declare(v["first_query"].name, kernel_ir.block_idx("x") * self.block_queries),
        ]
        out.append(_declare(v["tiles"].name, self._tiles()))
        out += [*(kernel_ir.Store(n["running_max"], (ex.const(h),), ex.const(-math.inf, F32)) for h in range(2)),
                *(kernel_ir.Store(n["running_sum"], (ex.const(h),), ex.const(0.0, F32)) for h in range(2)),
                *(kernel_ir.Store(n["out"], (ex.const(i),), ex.const(0.0, F32))
                  for i in range(4 * self.feature_chunks))]
        out += self._queries()
        for t in range(self.stages - 1):
            out += [kernel_ir.If(ex.op("lt", ex.const(t), v["tiles"]), self._tile_copies(ex.const(t))),
                    kernel_ir.CpAsyncCommit()]
        tile = [
            _declare(v["stage"].name, v["t"] % self.stages),
            kernel_ir.If(ex.op("lt", v["t"] + self.stages - 1, v["tiles"]),
                         self._tile_copies(v["t"] + self.stages - 1)),
            kernel_ir.CpAsyncCommit(),
            kernel_ir.CpAsyncWait(self.stages - 1),
            kernel_ir.Barrier(),
            *self._scores(),
            *self._softmax(),
            *self._values(),
            kernel_ir.Barrier(),
        ]
        if self.p.last_visible_key(ex.const(0)) is not None:  # bounds alike in every block: the tiles past the
            tile = [kernel_ir.If(ex.op("lt", v["t"], v["tiles"]), tile)]  # block's own count do nothing
        out.append(kernel_ir.For(v["t"].name, ex.const(0), ex.const(self.all_tiles), 1, tile))
        return out + self._outputs()

    def arrays(self) -> list[kernel_ir.Array]:
        n = self.n
        return [
            kernel_ir.Array(n["q_big"], F32, (self.block_queries, self.depth_row), "shared"),
            kernel_ir.Array(n["q_small"], F32, (self.block_queries, self.depth_row), "shared"),
            kernel_ir.Array(n["k_tile"], F32, (self.stages * self.keys, self.depth_row), "shared"),
            kernel_ir.Array(n["v_tile"], F32, (self.stages * self.keys, self.feature_row), "shared"),
            kernel_ir.Array(n["scores"], F32, (4 * self.key_chunks,), "register"),
            kernel_ir.Array(n["small_probabilities"], F32, (4 * self.key_chunks,), "register"),
            kernel_ir.Array(n["out"], F32, (4 * self.feature_chunks,), "register"),
            kernel_ir.Array(n["running_max"], F32, (2,), "register"),
            kernel_ir.Array(n["running_sum"], F32, (2,), "register"),
            kernel_ir.Array(n["a_big"], F32, (4,), "register"),
            kernel_ir.Array(n["a_small"], F32, (4,), "register"),
            kernel_ir.Array(n["b_big"], F32, (2,), "register"),
            kernel_ir.Array(n["b_small"], F32, (2,), "register"),
            kernel_ir.Array(n["step_sum"], F32, (4,), "register"),
        ]

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        arrays = self.arrays()
        p = self.p
        grid = (math.ceil(p.queries_extent / self.block_queries), p.groups_extent, 1)
        return kernel_ir.Kernel(
            name=self.kernel.name, params=list(loop_to_kernel.params(self.kernel)), arrays=arrays, body=self.body(),
            launch=kernel_ir.Launch(grid, (self.threads, 1, 1), dynamic_shared_bytes(arrays, static_shared_bytes)),
            sizes=loop_to_kernel.size_params(self.kernel))


def lower_float32_attention(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    kernel = Float32AttentionWriter(tile, analyse(tile.kernel)).kernel_ir(target.max_shared_bytes_per_block)
    kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
    return kernel

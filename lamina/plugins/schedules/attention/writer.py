"""The Kernel IR of the attention schedule: one pass over the keys, the scores kept on chip.

A block holds ``64 w`` query rows of one batch and head, ``w`` consumer warpgroups of 64 rows
each, and walks the key blocks that its queries see. Thread 0 sets up the mbarriers, asks the
TMA for the queries (once) and for the keys and values of the first ``stages`` key blocks, each
key block's boxes completing on its stage's barrier; after every key block it asks for the one
``stages`` blocks later into the stage just freed. For each key block every warpgroup

1. waits for the stage, multiplies its queries by the keys (wgmma m64nKk16, K the keys of the
   block) into float32 scores in registers: lane ``4 g + t`` of warp ``v`` holds the scores of
   rows ``16 v + g`` and ``16 v + g + 8`` at keys ``8 j + 2 t + e`` (``kernel_ir.Wgmma``);
2. computes each score as the program does (its scale, mask, soft cap: the Loop IR's score
   with the sum read from the register), keys past the last and queries past the last as
   ``-inf``;
3. runs the online softmax: each row's maximum over the block (the four lanes of a row combine
   theirs with two shuffles), the running maximum raised to it, the running sum and the output
   accumulators rescaled by ``exp(old - new)``; each probability ``exp(score - maximum)`` is
   added to the lane's part of the running sum and stored rounded to the operands' type in the
   warpgroup's tile of shared memory, in the 128-byte swizzle;
4. after a barrier, adds the probabilities times the values (wgmma m64nFk16, F the features)
   to its output accumulators: the values staged as they lie, key by key along the features, in
   panels of 64 features that the wgmma transposes (``imm-trans-b``), or, where the features are
   no whole panels, staged feature by feature along the keys from a K-major copy.

A key block's stage is refilled after a second barrier, once every warpgroup's products of it
are done. At the end the four lanes of a row add up their parts of the sum, and the output,
divided by it, goes through the program's epilogue (the cast, the output's layout). A row that
sees no key has a sum of zero: NaN, as a plain softmax gives, or zeros where the program asks
for them (``AttentionLoops.divided``).
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.recognise import Attention, analyse
from lamina.plugins.schedules.attention.tiling import PANEL, AttentionSettings
from lamina.plugins.schedules.contraction.layout import KernelNames, batch_coordinates, dynamic_shared_bytes

QUAD = 4
"""Lanes that share a query row of a wgmma accumulator."""


class AttentionWriter:
    def __init__(self, tile: tile_ir.TileKernel, a: Attention):
        settings: AttentionSettings = tile.settings
        self.tile, self.a, self.kernel = tile, a, a.kernel
        self.groups, self.stages, self.block_keys = settings.consumer_warpgroups, settings.stages, settings.block_keys
        self.block_queries = kernel_ir.WGMMA_M * self.groups
        self.panels = math.ceil(a.depth / PANEL)
        self.key_panels = self.block_keys // PANEL
        self.features = a.features
        self.values_along_features = a.values_along_features
        # a stage's panels of values: of 64 features, a row per key, where they lie along the
        # features; else of 64 keys, a row per feature
        self.value_panels = self.features // PANEL if self.values_along_features else self.key_panels
        self.all_key_blocks = math.ceil(a.keys_extent / self.block_keys)
        loop_vars = {s.var for s in loop_ir.statements(self.kernel.body) if isinstance(s, loop_ir.Loop)}
        self.names = names = KernelNames({b.name for b in self.kernel.inputs + self.kernel.outputs} | loop_vars
                                         | {a.scores.acc, a.values.acc})
        (self.tid, self.warpgroup, self.lane, self.warp, self.batch, self.row, self.kb, self.stage,
         self.visible) = (ex.Var(names.fresh(n)) for n in ("tid", "warpgroup", "lane", "warp", "batch", "row", "kb",
                                                           "stage", "key_blocks"))
        (self.maximum, self.largest, self.used, self.scale, self.total) = (
            ex.Var(names.fresh(n), dtypes.float32) for n in ("block_max", "new_max", "max_used", "rescale", "sum"))
        self.array_names = {n: names.fresh(n) for n in ("q_tile", "k_tile", "v_tile", "p_tile", "q_full", "full",
                                                          "scores", "out", "running_max", "running_sum")}
        self.maps = {side: names.fresh(f"{view.operand.load.buffer}_map")
                     for side, view in (("q", a.queries), ("k", a.keys), ("v", a.value_rows))}
        self.batch_env = batch_coordinates(a.scores, self.batch)

    def _n(self, key: str) -> str:
        """The Kernel IR name of the kernel's array ``key``."""
        return self.array_names[key]

    # --- copies ------------------------------------------------------------------

    def _query_loads(self) -> list[kernel_ir.Stmt]:
        view = self.a.queries
        row = view.first_row(self.batch_env) + kernel_ir.block_idx("x") * self.block_queries
        box = self.block_queries * PANEL * self.a.dtype.itemsize
        return [kernel_ir.MbarrierArrive(self._n("q_full"), (ex.const(0),), box * self.panels),
                *(kernel_ir.TmaLoad(self._n("q_tile"), (ex.const(p), ex.const(0), ex.const(0)), self.maps["q"], row,
                                    view.first_column(self.batch_env) + PANEL * p, self._n("q_full"), (ex.const(0),))
                  for p in range(self.panels))]

    def _key_block_loads(self, block: Expr) -> list[kernel_ir.Stmt]:
        """The keys and values of key block ``block`` into its stage."""
        stage = block % self.stages
        keys, values = self.a.keys, self.a.value_rows
        item = self.a.dtype.itemsize
        stage_bytes = (self.panels * self.block_keys * PANEL + self.key_panels * self.features * PANEL) * item
        out: list[kernel_ir.Stmt] = [kernel_ir.MbarrierArrive(self._n("full"), (stage,), stage_bytes)]
        key_row = keys.first_row(self.batch_env) + block * self.block_keys
        for p in range(self.panels):
            out.append(kernel_ir.TmaLoad(self._n("k_tile"), (stage * self.panels + p, ex.const(0), ex.const(0)),
                                         self.maps["k"], key_row, keys.first_column(self.batch_env) + PANEL * p,
                                         self._n("full"), (stage,)))
        for p in range(self.value_panels):
            if self.values_along_features:
                row = values.first_row(self.batch_env) + block * self.block_keys
                column = values.first_column(self.batch_env) + PANEL * p
            else:
                row = values.first_row(self.batch_env)
                column = values.first_column(self.batch_env) + block * self.block_keys + PANEL * p
            out.append(kernel_ir.TmaLoad(self._n("v_tile"), (stage * self.value_panels + p, ex.const(0), ex.const(0)),
                                         self.maps["v"], row, column,
                                         self._n("full"), (stage,)))
        return out

    # --- the key blocks ----------------------------------------------------------

    def _key_blocks_seen(self) -> list[kernel_ir.Stmt]:
        """How many key blocks the block's queries see: all, or those up to the causal limit."""
        last_query = ex.op("min", (kernel_ir.block_idx("x") + 1) * self.block_queries, self.a.queries_extent) - 1
        last = self.a.last_visible_key(last_query)
        seen: Expr = ex.const(self.all_key_blocks)
        if last is not None:
            seen = ex.op("max", ex.op("min", seen, last // self.block_keys + 1), 0)
        return [kernel_ir.Declare(self.visible.name, self.visible.dtype, seen)]

    def _scores_product(self) -> list[kernel_ir.Stmt]:
        k = kernel_ir.wgmma_k(self.a.dtype)
        accumulators = [(ex.const(i),) for i in range(self.block_keys // 2)]
        out = []
        for p in range(self.panels):
            for step in range(PANEL // k):
                out.append(kernel_ir.Wgmma(
                    self._n("scores"), accumulators, self._n("q_tile"),
                    (ex.const(p), self.warpgroup * kernel_ir.WGMMA_M, ex.const(k * step)),
                    self._n("k_tile"), (self.stage * self.panels + p, ex.const(0), ex.const(k * step)),
                    self.block_keys, accumulate=(p, step) != (0, 0), operand_dtype=self.a.dtype))
        return out

    def _values_product(self) -> list[kernel_ir.Stmt]:
        k = kernel_ir.wgmma_k(self.a.dtype)
        accumulators = [(ex.const(i),) for i in range(self.features // 2)]
        out = []
        for step in range(self.block_keys // k):
            panel, column = divmod(k * step, PANEL)
            if self.values_along_features:
                values = (self.stage * self.value_panels, ex.const(k * step), ex.const(0))
            else:
                values = (self.stage * self.value_panels + panel, ex.const(0), ex.const(column))
            out.append(kernel_ir.Wgmma(
                self._n("out"), accumulators, self._n("p_tile"),
                (self.warpgroup * self.key_panels + panel, ex.const(0), ex.const(column)),
                self._n("v_tile"), values, self.features, operand_dtype=self.a.dtype,
                b_layout=self.a.value_rows.layout))
        return out

    def _score(self, score: Expr, i: int, query: Expr, key: Expr) -> Expr:
        a = self.a
        dot = kernel_ir.Load(self._n("scores"), (ex.const(i),), dtypes.float32)
        env = {**self.batch_env, a.query_var: query, a.key_var: key, a.scores.acc: dot}
        return ex.cast(loop_to_kernel.translate_expr(score, self.kernel, env), dtypes.float32)

    def _cells(self, h: int) -> list[tuple[int, int]]:
        """(accumulator, column in the key block) of the thread's scores in row ``h`` of its two."""
        return [(4 * j + 2 * h + e, 8 * j + e) for j in range(self.block_keys // 8) for e in range(2)]

    def _score_stores(self, score: Expr) -> list[kernel_ir.Stmt]:
        """Step 2 for the thread's two rows with ``score``: keys and queries past the last as -inf."""
        a, out = self.a, []
        t = self.lane % QUAD
        for h in range(2):
            query = self.row + 8 * h
            for i, column in self._cells(h):
                key = self.kb * self.block_keys + column + 2 * t
                guard = []
                if a.keys_extent % self.block_keys:
                    guard.append(ex.op("lt", key, a.keys_extent))
                if a.queries_extent % self.block_queries:
                    guard.append(ex.op("lt", query, a.queries_extent))
                store = kernel_ir.Store(self._n("scores"), (ex.const(i),), self._score(score, i, query, key))
                if guard:
                    condition = guard[0] if len(guard) == 1 else ex.op("and", *guard)
                    out.append(kernel_ir.If(condition, [store], [kernel_ir.Store(
                        self._n("scores"), (ex.const(i),), ex.const(-math.inf, dtypes.float32))]))
                else:
                    out.append(store)
        return out

    def _scores_by_block(self) -> list[kernel_ir.Stmt]:
        """Step 2 with the score that the key block allows (``block_masks``): the mask's
        comparison of key and query settled where the block lies off the diagonal."""
        first_query = kernel_ir.block_idx("x") * self.block_queries
        first_key = self.kb * self.block_keys
        box = {self.a.query_var: (first_query, first_query + self.block_queries - 1),
               self.a.key_var: (first_key, first_key + self.block_keys - 1)}
        variants = self.a.by_block.variants(box, hidden=not self.tile.settings.causal)
        stores = self._score_stores(variants[-1][1])
        for condition, score in reversed(variants[:-1]):
            stores = [kernel_ir.If(condition, self._score_stores(score), stores)]
        return stores

    def _softmax(self) -> list[kernel_ir.Stmt]:
        """Steps 2 and 3 for the thread's two rows."""
        a, out = self.a, self._scores_by_block()
        scores = self._n("scores")
        t = self.lane % QUAD
        minus_infinity = ex.const(-math.inf, dtypes.float32)
        for h in range(2):
            cells = self._cells(h)
            values = [kernel_ir.Load(scores, (ex.const(i),), dtypes.float32) for i, _ in cells]
            out.append(_set(self.maximum, balanced_tree("max", values), declare=h == 0))
            for mask in (1, 2):
                out.append(kernel_ir.Assign(self.maximum.name,
                                            ex.op("max", self.maximum, kernel_ir.ShuffleXor(self.maximum, mask))))
            running_max = kernel_ir.Load(self._n("running_max"), (ex.const(h),), dtypes.float32)
            running_sum = kernel_ir.Load(self._n("running_sum"), (ex.const(h),), dtypes.float32)
            out += [
                _set(self.largest, ex.op("max", running_max, self.maximum), declare=h == 0),
                _set(self.used, ex.op("where", ex.op("eq", self.largest, minus_infinity), ex.const(0.0, dtypes.float32),
                                      self.largest), declare=h == 0),
                _set(self.scale, ex.op("exp", ex.op("sub", running_max, self.used)), declare=h == 0),
                kernel_ir.Store(self._n("running_max"), (ex.const(h),), self.largest),
            ]
            for (i, _), value in zip(cells, values):
                out.append(kernel_ir.Store(scores, (ex.const(i),), ex.op("exp", ex.op("sub", value, self.used))))
            out.append(kernel_ir.Store(self._n("running_sum"), (ex.const(h),),
                                       ex.op("add", ex.op("mul", running_sum, self.scale),
                                             balanced_tree("add", values))))
            row_in_tile = self.warp * 16 + self.lane // QUAD + 8 * h
            for i, column in cells:
                panel, at = divmod(column, PANEL)
                out.append(kernel_ir.Store(self._n("p_tile"),
                                           (self.warpgroup * self.key_panels + panel, row_in_tile, at + 2 * t),
                                           ex.cast(kernel_ir.Load(scores, (ex.const(i),), dtypes.float32),
                                                   a.dtype)))
            for j in range(self.features // 8):
                for e in range(2):
                    i = 4 * j + 2 * h + e
                    acc = kernel_ir.Load(self._n("out"), (ex.const(i),), dtypes.float32)
                    out.append(kernel_ir.Store(self._n("out"), (ex.const(i),), ex.op("mul", acc, self.scale)))
        return out

    def _key_block(self) -> list[kernel_ir.Stmt]:
        refill = self.kb + self.stages
        return [
            kernel_ir.Declare(self.stage.name, self.stage.dtype, self.kb % self.stages),
            kernel_ir.MbarrierWait(self._n("full"), (self.stage,), self.kb // self.stages % 2),
            kernel_ir.WgmmaFence(),
            *self._scores_product(),
            kernel_ir.WgmmaCommit(),
            kernel_ir.WgmmaWait(0),
            *self._softmax(),
            kernel_ir.AsyncProxyFence(),
            kernel_ir.Barrier(),
            kernel_ir.WgmmaFence(),
            *self._values_product(),
            kernel_ir.WgmmaCommit(),
            kernel_ir.WgmmaWait(0),
            kernel_ir.Barrier(),
            kernel_ir.If(ex.op("and", ex.op("eq", self.tid, 0), ex.op("lt", refill, self.visible)),
                         self._key_block_loads(refill)),
        ]

    # --- the kernel --------------------------------------------------------------

    def _epilogue(self) -> list[kernel_ir.Stmt]:
        a, out = self.a, []
        for h in range(2):
            query = self.row + 8 * h
            running_sum = kernel_ir.Load(self._n("running_sum"), (ex.const(h),), dtypes.float32)
            out.append(_set(self.total, running_sum, declare=h == 0))
            for mask in (1, 2):
                out.append(kernel_ir.Assign(self.total.name,
                                            ex.op("add", self.total, kernel_ir.ShuffleXor(self.total, mask))))
            guard = ex.op("lt", query, a.queries_extent) if a.queries_extent % self.block_queries else None
            for j in range(self.features // 8):
                for e in range(2):
                    i = 4 * j + 2 * h + e
                    acc = kernel_ir.Load(self._n("out"), (ex.const(i),), dtypes.float32)
                    feature = 8 * j + e + 2 * (self.lane % QUAD)
                    env = {**self.batch_env, a.values.m: query, a.values.n: feature,
                           a.values.acc: a.loops.divided(acc, self.total)}
                    out += loop_to_kernel.translate_body(a.values.epilogue, self.kernel, env, guard=guard)
        return out

    def body(self) -> list[kernel_ir.Stmt]:
        tid = kernel_ir.thread_idx("x")
        declarations = [
            kernel_ir.Declare(self.tid.name, self.tid.dtype, tid),
            kernel_ir.Declare(self.warpgroup.name, self.warpgroup.dtype, self.tid // kernel_ir.WARPGROUP_SIZE),
            kernel_ir.Declare(self.lane.name, self.lane.dtype, self.tid % kernel_ir.WARP_SIZE),
            kernel_ir.Declare(self.warp.name, self.warp.dtype,
                              self.tid % kernel_ir.WARPGROUP_SIZE // kernel_ir.WARP_SIZE),
            kernel_ir.Declare(self.batch.name, self.batch.dtype, kernel_ir.block_idx("y")),
            kernel_ir.Declare(self.row.name, self.row.dtype,
                              kernel_ir.block_idx("x") * self.block_queries + self.warpgroup * kernel_ir.WGMMA_M
                              + self.warp * 16 + self.lane // QUAD),
            *self._key_blocks_seen(),
        ]
        inits = [kernel_ir.MbarrierInit(self._n("q_full"), (ex.const(0),), 1),
                 *(kernel_ir.MbarrierInit(self._n("full"), (ex.const(i),), 1) for i in range(self.stages))]
        first_loads: list[kernel_ir.Stmt] = list(self._query_loads())
        for block in range(self.stages):
            first_loads.append(kernel_ir.If(ex.op("lt", block, self.visible), self._key_block_loads(ex.const(block))))
        clear = [kernel_ir.Store(self._n("running_max"), (ex.const(h),), ex.const(-math.inf, dtypes.float32))
                 for h in range(2)]
        clear += [kernel_ir.Store(self._n("running_sum"), (ex.const(h),), ex.const(0.0, dtypes.float32))
                  for h in range(2)]
        clear += [kernel_ir.Store(self._n("out"), (ex.const(i),), ex.const(0.0, dtypes.float32))
                  for i in range(self.features // 2)]
        loop = kernel_ir.For(self.kb.name, ex.const(0), ex.const(self.all_key_blocks), 1,
                             [kernel_ir.If(ex.op("lt", self.kb, self.visible), self._key_block())])
        return [*declarations,
                kernel_ir.If(ex.op("eq", self.tid, 0), inits),
                kernel_ir.Barrier(),
                kernel_ir.If(ex.op("eq", self.tid, 0), first_loads),
                *clear,
                kernel_ir.MbarrierWait(self._n("q_full"), (ex.const(0),), ex.const(0)),
                loop,
                *self._epilogue()]

    def tensor_maps(self) -> list[kernel_ir.TensorMap]:
        boxes = {"q": (self.block_queries, PANEL), "k": (self.block_keys, PANEL),
                 "v": (self.block_keys, PANEL) if self.values_along_features else (self.features, PANEL)}
        maps = []
        for side, view in (("q", self.a.queries), ("k", self.a.keys), ("v", self.a.value_rows)):
            maps.append(kernel_ir.TensorMap(self.maps[side], view.operand.load.buffer, (view.rows, view.columns),
                                            view.row_stride, boxes[side], kernel_ir.SWIZZLE_BYTES))
        return maps

    def arrays(self) -> list[kernel_ir.Array]:
        dtype, swizzle = self.a.dtype, kernel_ir.SWIZZLE_BYTES
        return [
            kernel_ir.Array(self._n("q_tile"), dtype, (self.panels, self.block_queries, PANEL), "shared", swizzle),
            kernel_ir.Array(self._n("k_tile"), dtype, (self.stages * self.panels, self.block_keys, PANEL), "shared",
                            swizzle),
            kernel_ir.Array(self._n("v_tile"), dtype, (self.stages * self.value_panels,
                                                        self.block_keys if self.values_along_features else self.features,
                                                        PANEL), "shared", swizzle),
            kernel_ir.Array(self._n("p_tile"), dtype, (self.groups * self.key_panels, kernel_ir.WGMMA_M, PANEL),
                            "shared", swizzle),
            kernel_ir.Array(self._n("q_full"), dtypes.int64, (1,), "shared"),
            kernel_ir.Array(self._n("full"), dtypes.int64, (self.stages,), "shared"),
            kernel_ir.Array(self._n("scores"), dtypes.float32, (self.block_keys // 2,), "register"),
            kernel_ir.Array(self._n("out"), dtypes.float32, (self.features // 2,), "register"),
            kernel_ir.Array(self._n("running_max"), dtypes.float32, (2,), "register"),
            kernel_ir.Array(self._n("running_sum"), dtypes.float32, (2,), "register"),
        ]

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        grid = self.tile.grid_shape()
        arrays = self.arrays()
        return kernel_ir.Kernel(
            name=self.kernel.name,
            params=loop_to_kernel.params(self.kernel),
            arrays=arrays,
            body=self.body(),
            launch=kernel_ir.Launch((grid["x"], grid["y"], grid["z"]), (self.groups * kernel_ir.WARPGROUP_SIZE, 1, 1),
                                    dynamic_shared_bytes(arrays, static_shared_bytes)),
            tensor_maps=self.tensor_maps(),
        )


def _set(var: ex.Var, value: Expr, declare: bool) -> kernel_ir.Stmt:
    """``var = value``, declaring ``var`` the first time."""
    return kernel_ir.Declare(var.name, var.dtype, value) if declare else kernel_ir.Assign(var.name, value)


def balanced_tree(op: str, values: list[Expr]) -> Expr:
    """``values`` combined by ``op`` in a balanced tree, so that the adds and maxima can overlap."""
    while len(values) > 1:
        values = [ex.op(op, values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def lower_attention(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    kernel = AttentionWriter(tile, analyse(tile.kernel)).kernel_ir(target.max_shared_bytes_per_block)
    kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
    return kernel

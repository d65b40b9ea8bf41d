"""The Kernel IR of the attention schedule: one pass over the keys, the scores kept on chip.

A block holds ``64 w`` query rows of one batch and head, ``w`` consumer warpgroups of 64 rows
each, and walks the key blocks that its queries see. Thread 0 sets up the mbarriers, asks the
TMA for the queries (once) and for the keys and values of the first ``stages`` key blocks, each
key block's boxes completing on its stage's full barrier. For each key block ``kb`` every
warpgroup

1. waits for the stage, starts the product of its queries by the keys (wgmma m64nKk16, K the
   keys of the block) into float32 scores in registers: lane ``4 g + t`` of warp ``v`` holds
   the scores of rows ``16 v + g`` and ``16 v + g + 8`` at keys ``8 j + 2 t + e``
   (``kernel_ir.Wgmma``), and, behind it, the product of key block ``kb - 1``'s probabilities
   by its values (wgmma m64nFk16, F the features), A from registers;
2. once the scores are done (the values' product still running), computes each score as the
   program does (its scale, mask, soft cap: the Loop IR's score with the sum read from the
   register), keys past the last and queries past the last as ``-inf``, and runs the online
   softmax: each row's maximum over the block (the four lanes of a row combine theirs with two
   shuffles), the running maximum raised to it, the running sum rescaled by ``exp(old - new)``;
   each probability ``exp(score - maximum)`` is added to the lane's part of the running sum;
3. once the values' product is done, releases key block ``kb - 1``'s stage (every consumer
   thread arrives on its empty barrier), rescales the output accumulators by ``exp(old - new)``
   and packs the probabilities, rounded to the operands' type, two to a 32-bit register
   (``PackedPair``): the scores' accumulator layout is the layout wgmma takes A in from
   registers, so the probabilities never go through shared memory.

So the tensor cores run the values' product of one key block while the warpgroup computes the
softmax of the next (FlashAttention-3's overlap within a warpgroup). With ``warpgroups =
ping_pong`` a block's two warpgroups also take turns (FlashAttention-3's ping-pong): before
issuing a key block's products a warpgroup waits on its turn mbarrier, which the other
completes, every thread of it arriving, once it has issued its own, so that one warpgroup's
softmax runs while the other's products keep the tensor cores busy; each warpgroup walks the
keys in a branch of its own, and the second one's first thread refills the stages (it releases
them last).

The values are staged as they lie, key by key along the features, in panels of 64 features
that the wgmma transposes (``imm-trans-b``), or, where the features are no whole panels, staged
feature by feature along the keys from a K-major copy. In step, at the end of key block ``kb``,
thread 0 refills the stage of ``kb - 1`` with the block ``stages`` later, once every warpgroup
has released it: the first warpgroup waits there for the others, and nothing else holds the
warpgroups in step (no barrier of the whole block; the last warpgroup refilling instead was no
faster: ``experiments/attention_overlap/``). After the last key
block's values, the four lanes of a row add up their parts of the sum, and the output, divided
by it, goes through the program's epilogue (the cast, the output's layout). A row that sees no
key has a sum of zero: NaN, as a plain softmax gives, or zeros where the program asks for them
(``AttentionLoops.divided``).
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir, loop_ir, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.recognise import Attention, analyse
from lamina.plugins.schedules.attention.tiling import PANEL, PING_PONG, AttentionSettings
from lamina.plugins.schedules.contraction.layout import KernelNames, batch_coordinates, dynamic_shared_bytes

QUAD = 4
"""Lanes that share a query row of a wgmma accumulator."""


class AttentionWriter:
    def __init__(self, tile: tile_ir.TileKernel, a: Attention):
        settings: AttentionSettings = tile.settings
        self.tile, self.a, self.kernel = tile, a, a.kernel
        self.groups, self.stages, self.block_keys = settings.consumer_warpgroups, settings.stages, settings.block_keys
        self.in_turn = settings.warpgroups == PING_PONG
        # taking turns, the second warpgroup releases a stage last: its first thread refills it
        self.refiller = kernel_ir.WARPGROUP_SIZE if self.in_turn else 0
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
        self.previous = ex.Var(names.fresh("previous_stage"))
        self.windowed = settings.windowed
        self.skipped = ex.Var(names.fresh("skipped_key_blocks"))
        (self.maximum, self.largest, self.used, self.used_log2, self.total) = (
            ex.Var(names.fresh(n), dtypes.float32) for n in ("block_max", "new_max", "max_used", "max_log2", "sum"))
        self.array_names = {n: names.fresh(n) for n in ("q_tile", "k_tile", "v_tile", "q_full", "full", "empty",
                                                          "scores", "probabilities", "out", "running_max",
                                                          "running_sum", "rescale", "shown", "turn")}
        self.shown_here = ex.Var(names.fresh("shown_here"), dtypes.int32)
        self.consumers = self.groups * kernel_ir.WARPGROUP_SIZE
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
        key_row = keys.first_row(self.batch_env) + self._in_keys(block) * self.block_keys
        for p in range(self.panels):
            out.append(kernel_ir.TmaLoad(self._n("k_tile"), (stage * self.panels + p, ex.const(0), ex.const(0)),
                                         self.maps["k"], key_row, keys.first_column(self.batch_env) + PANEL * p,
                                         self._n("full"), (stage,)))
        for p in range(self.value_panels):
            if self.values_along_features:
                row = values.first_row(self.batch_env) + self._in_keys(block) * self.block_keys
                column = values.first_column(self.batch_env) + PANEL * p
            else:
                row = values.first_row(self.batch_env)
                column = values.first_column(self.batch_env) + self._in_keys(block) * self.block_keys + PANEL * p
            out.append(kernel_ir.TmaLoad(self._n("v_tile"), (stage * self.value_panels + p, ex.const(0), ex.const(0)),
                                         self.maps["v"], row, column,
                                         self._n("full"), (stage,)))
        return out

    # --- the key blocks ----------------------------------------------------------

    def _key_blocks_seen(self) -> list[kernel_ir.Stmt]:
        """How many key blocks the block's queries see: all, or those up to the causal limit; and
        in a sliding window, how many before the first that any of them sees are skipped."""
        last_query = ex.op("min", (kernel_ir.block_idx("x") + 1) * self.block_queries, self.a.queries_extent) - 1
        last = self.a.last_visible_key(last_query)
        seen: Expr = ex.const(self.all_key_blocks)
        if last is not None:
            seen = ex.op("max", ex.op("min", seen, last // self.block_keys + 1), 0)
        if not self.windowed:
            return [kernel_ir.Declare(self.visible.name, self.visible.dtype, seen)]
        first = self.a.first_visible_key(kernel_ir.block_idx("x") * self.block_queries)
        return [kernel_ir.Declare(self.skipped.name, self.skipped.dtype, ex.op("max", first, 0) // self.block_keys),
                kernel_ir.Declare(self.visible.name, self.visible.dtype, ex.op("max", seen - self.skipped, 0))]

    def _in_keys(self, block: Expr) -> Expr:
        """Key block ``block`` of those the block walks, counted from the first key."""
        return self.skipped + block if self.windowed else block

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

    def _values_product(self, stage: Expr) -> list[kernel_ir.Stmt]:
        """The probabilities in registers times the values in ``stage``, added to the output: per 16
        keys, the four words that pack the scores' accumulators ``8 step .. 8 step + 7``."""
        k = kernel_ir.wgmma_k(self.a.dtype)
        accumulators = [(ex.const(i),) for i in range(self.features // 2)]
        out = []
        for step in range(self.block_keys // k):
            panel, column = divmod(k * step, PANEL)
            if self.values_along_features:
                values = (stage * self.value_panels, ex.const(k * step), ex.const(0))
            else:
                values = (stage * self.value_panels + panel, ex.const(0), ex.const(column))
            words = [kernel_ir.Load(self._n("probabilities"), (ex.const(4 * step + w),), dtypes.int32)
                     for w in range(kernel_ir.REGISTER_VALUES)]
            out.append(kernel_ir.Wgmma(
                self._n("out"), accumulators, words, (), self._n("v_tile"), values, self.features,
                a_from="registers", operand_dtype=self.a.dtype, b_layout=self.a.value_rows.layout))
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
                key = self._in_keys(self.kb) * self.block_keys + column + 2 * t
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
        comparison of key and query settled where the block lies off the diagonal, and what it
        reads of the key alone where the block's flag says every key passes it."""
        first_query = kernel_ir.block_idx("x") * self.block_queries
        first_key = self._in_keys(self.kb) * self.block_keys
        box = {self.a.query_var: (first_query, first_query + self.block_queries - 1),
               self.a.key_var: (first_key, first_key + self.block_keys - 1)}
        variants = self.a.by_block.variants(box, hidden=not self.tile.settings.causal)
        stores = self._shown_or_not(variants[-1][1])
        for condition, score in reversed(variants[:-1]):
            stores = [kernel_ir.If(condition, self._shown_or_not(score), stores)]
        return stores

    def _shown_or_not(self, score: Expr) -> list[kernel_ir.Stmt]:
        """Step 2 with ``score``, or with what it is where every key of the block is shown."""
        every_key_shown = self.a.by_block.if_every_key_shown(score)
        if every_key_shown == score:
            return self._score_stores(score)
        flag = kernel_ir.Load(self._n("shown"), (self._in_keys(self.kb),), dtypes.int32)
        return [kernel_ir.If(ex.op("ne", flag, 0), self._score_stores(every_key_shown), self._score_stores(score))]

    def _shown_flags(self) -> list[kernel_ir.Stmt]:
        """Each key block's flag: 1 where the score's condition of the key alone (``block_masks``)
        holds for every key of it, else 0. A warp takes a key block at a time, each lane its
        keys 32 apart, and the lanes' verdicts meet by shuffles; the block's barrier after the
        barriers' initialisation publishes the flags."""
        a = self.a
        condition = a.by_block.shown
        warps = self.consumers // kernel_ir.WARP_SIZE
        flag, out = self.shown_here, []
        for turn in range(math.ceil(self.all_key_blocks / warps)):
            block = self.tid // kernel_ir.WARP_SIZE + turn * warps
            out.append(_set(flag, ex.const(1, dtypes.int32), declare=turn == 0))
            for step in range(math.ceil(self.block_keys / kernel_ir.WARP_SIZE)):
                key = block * self.block_keys + kernel_ir.WARP_SIZE * step + self.lane
                shown = loop_to_kernel.translate_expr(condition, self.kernel, {**self.batch_env, a.key_var: key})
                out.append(kernel_ir.If(ex.op("lt", key, a.keys_extent), [kernel_ir.Assign(
                    flag.name, ex.op("where", shown, flag, ex.const(0, dtypes.int32)))]))
            for mask in (16, 8, 4, 2, 1):
                out.append(kernel_ir.Assign(flag.name, ex.op("min", flag, kernel_ir.ShuffleXor(flag, mask))))
            out.append(kernel_ir.If(ex.op("and", ex.op("eq", self.lane, 0), ex.op("lt", block, self.all_key_blocks)),
                                    [kernel_ir.Store(self._n("shown"), (block,), flag)]))
        return out

    def _softmax(self) -> list[kernel_ir.Stmt]:
        """Step 2 for the thread's two rows: the scores, their exponentials in place, each row's
        running maximum and sum and its ``exp(old - new)`` in ``rescale``. Each exponential is
        ``exp2(score * log2(e) - maximum * log2(e))``: a multiply-add and the hardware's 2 ** x, where
        ``exp`` takes a dozen instructions, which in a key block of 64 features outnumber the
        tensor cores' time."""
        out = self._scores_by_block()
        scores = self._n("scores")
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
            scale = kernel_ir.Load(self._n("rescale"), (ex.const(h),), dtypes.float32)
            out += [
                _set(self.largest, ex.op("max", running_max, self.maximum), declare=h == 0),
                _set(self.used, ex.op("where", ex.op("eq", self.largest, minus_infinity), ex.const(0.0, dtypes.float32),
                                      self.largest), declare=h == 0),
                _set(self.used_log2, ex.op("mul", self.used, LOG2E), declare=h == 0),
                kernel_ir.Store(self._n("rescale"), (ex.const(h),), _exp(running_max, self.used_log2)),
                kernel_ir.Store(self._n("running_max"), (ex.const(h),), self.largest),
            ]
            for (i, _), value in zip(cells, values):
                out.append(kernel_ir.Store(scores, (ex.const(i),), _exp(value, self.used_log2)))
            out.append(kernel_ir.Store(self._n("running_sum"), (ex.const(h),),
                                       ex.op("add", ex.op("mul", running_sum, scale), balanced_tree("add", values))))
        return out

    def _rescaled_output(self) -> list[kernel_ir.Stmt]:
        """Step 3: the output accumulators of each of the thread's two rows times its ``exp(old - new)``."""
        out = []
        for h in range(2):
            scale = kernel_ir.Load(self._n("rescale"), (ex.const(h),), dtypes.float32)
            for j in range(self.features // 8):
                for e in range(2):
                    i = 4 * j + 2 * h + e
                    acc = kernel_ir.Load(self._n("out"), (ex.const(i),), dtypes.float32)
                    out.append(kernel_ir.Store(self._n("out"), (ex.const(i),), ex.op("mul", acc, scale)))
        return out

    def _packed_probabilities(self) -> list[kernel_ir.Stmt]:
        """Step 3: the probabilities rounded to the operands' type, two to a word, in the order in which
        the values' wgmma takes A from registers."""
        scores = self._n("scores")
        return [kernel_ir.Store(self._n("probabilities"), (ex.const(w),), kernel_ir.PackedPair(
                    kernel_ir.Load(scores, (ex.const(2 * w),), dtypes.float32),
                    kernel_ir.Load(scores, (ex.const(2 * w + 1),), dtypes.float32), self.a.dtype))
                for w in range(self.block_keys // 4)]

    def _first_key_block(self) -> list[kernel_ir.Stmt]:
        """Key block 0, in a loop of one step so that its statements read ``kb`` as the others do: its
        scores and softmax, with no values' product behind them (a wgmma that only some passes of a
        loop issue would make ptxas serialise every wgmma of the kernel)."""
        first = [
            kernel_ir.Declare(self.stage.name, self.stage.dtype, ex.const(0)),
            kernel_ir.MbarrierWait(self._n("full"), (self.stage,), ex.const(0)),
            *self._my_turn(ex.const(0)),
            kernel_ir.WgmmaFence(),
            *self._scores_product(),
            kernel_ir.WgmmaCommit(),
            *self._pass_the_turn(),
            kernel_ir.WgmmaWait(0),
            *self._softmax(),
            *self._packed_probabilities()]
        return [kernel_ir.For(self.kb.name, ex.const(0), ex.const(1), 1,
                              [kernel_ir.If(ex.op("lt", self.kb, self.visible), first)])]

    def _key_block(self) -> list[kernel_ir.Stmt]:
        """Key block ``kb`` after the first: its scores issued, the values of ``kb - 1`` behind them;
        its softmax; then ``kb - 1``'s stage released, the output rescaled, the probabilities packed,
        and the released stage refilled."""
        later = self.kb - 1 + self.stages
        refill = [kernel_ir.If(ex.op("and", ex.op("eq", self.tid, self.refiller), ex.op("lt", later, self.visible)), [
            kernel_ir.MbarrierWait(self._n("empty"), (self.previous,), (self.kb - 1) // self.stages % 2),
            *self._key_block_loads(later)])]
        return [
            kernel_ir.Declare(self.stage.name, self.stage.dtype, self.kb % self.stages),
            kernel_ir.Declare(self.previous.name, self.previous.dtype, (self.kb + (self.stages - 1)) % self.stages),
            kernel_ir.MbarrierWait(self._n("full"), (self.stage,), self.kb // self.stages % 2),
            *self._my_turn(self.kb % 2),
            kernel_ir.WgmmaFence(),
            *self._scores_product(),
            kernel_ir.WgmmaCommit(),
            *self._values_product(self.previous),
            kernel_ir.WgmmaCommit(),
            *self._pass_the_turn(),
            kernel_ir.WgmmaWait(1),
            *self._softmax(),
            kernel_ir.WgmmaWait(0),
            kernel_ir.MbarrierArrive(self._n("empty"), (self.previous,)),
            *self._rescaled_output(),
            *self._packed_probabilities(),
            *refill,
        ]

    def _last_values(self) -> list[kernel_ir.Stmt]:
        """The values' product of the last key block the queries see."""
        last = (self.visible - 1) % self.stages
        return [kernel_ir.If(ex.op("gt", self.visible, 0), [
            *self._my_turn(self.visible % 2), kernel_ir.WgmmaFence(), *self._values_product(last),
            kernel_ir.WgmmaCommit(), *self._pass_the_turn(), kernel_ir.WgmmaWait(0)])]

    def _my_turn(self, turn: Expr) -> list[kernel_ir.Stmt]:
        """Taking turns, before the warpgroup issues its products: wait until the other has issued
        those of the turn before (turn ``t`` of a warpgroup is the phase of parity ``t % 2`` of its
        turn barrier, which the other completes by arriving, every thread of it, after issuing)."""
        if not self.in_turn:
            return []
        return [kernel_ir.MbarrierWait(self._n("turn"), (self.warpgroup,), turn % 2)]

    def _pass_the_turn(self) -> list[kernel_ir.Stmt]:
        """Taking turns, once the warpgroup has issued its products: the other's turn."""
        if not self.in_turn:
            return []
        return [kernel_ir.MbarrierArrive(self._n("turn"), (1 - self.warpgroup,))]

    def _walk(self) -> list[kernel_ir.Stmt]:
        """The key blocks, their products and softmax: in step, or, taking turns, each warpgroup at
        its own pace (``Divergent``: the simulator runs them as tasks that wait for each other), the
        second giving the first its first turn."""
        walk = [*self._first_key_block(), self._key_block_loop(), *self._last_values()]
        if not self.in_turn:
            return walk
        start = kernel_ir.If(ex.op("eq", self.warpgroup, 1), [kernel_ir.MbarrierArrive(self._n("turn"), (ex.const(0),))])
        return [kernel_ir.Divergent(self.warpgroup, self.groups, [start, *walk])]

    def _key_block_loop(self) -> kernel_ir.For:
        return kernel_ir.For(self.kb.name, ex.const(1), ex.const(self.all_key_blocks), 1,
                             [kernel_ir.If(ex.op("lt", self.kb, self.visible), self._key_block())])

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
                 *(kernel_ir.MbarrierInit(self._n("full"), (ex.const(i),), 1) for i in range(self.stages)),
                 *(kernel_ir.MbarrierInit(self._n("empty"), (ex.const(i),), self.consumers)
                   for i in range(self.stages)),
                 *(kernel_ir.MbarrierInit(self._n("turn"), (ex.const(i),), kernel_ir.WARPGROUP_SIZE)
                   for i in range(2 if self.in_turn else 0))]
        first_loads: list[kernel_ir.Stmt] = list(self._query_loads())
        for block in range(self.stages):
            first_loads.append(kernel_ir.If(ex.op("lt", block, self.visible), self._key_block_loads(ex.const(block))))
        clear = [kernel_ir.Store(self._n("running_max"), (ex.const(h),), ex.const(-math.inf, dtypes.float32))
                 for h in range(2)]
        clear += [kernel_ir.Store(self._n("running_sum"), (ex.const(h),), ex.const(0.0, dtypes.float32))
                  for h in range(2)]
        clear += [kernel_ir.Store(self._n("out"), (ex.const(i),), ex.const(0.0, dtypes.float32))
                  for i in range(self.features // 2)]
        flags = self._shown_flags() if self.a.by_block.shown is not None else []
        return [*declarations,
                kernel_ir.If(ex.op("eq", self.tid, 0), inits),
                *flags,
                kernel_ir.Barrier(),
                kernel_ir.If(ex.op("eq", self.tid, 0), first_loads),
                *clear,
                kernel_ir.MbarrierWait(self._n("q_full"), (ex.const(0),), ex.const(0)),
                *self._walk(),
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
            kernel_ir.Array(self._n("q_full"), dtypes.int64, (1,), "shared"),
            kernel_ir.Array(self._n("full"), dtypes.int64, (self.stages,), "shared"),
            kernel_ir.Array(self._n("empty"), dtypes.int64, (self.stages,), "shared"),
            kernel_ir.Array(self._n("scores"), dtypes.float32, (self.block_keys // 2,), "register"),
            kernel_ir.Array(self._n("probabilities"), dtypes.int32, (self.block_keys // 4,), "register"),
            kernel_ir.Array(self._n("out"), dtypes.float32, (self.features // 2,), "register"),
            kernel_ir.Array(self._n("running_max"), dtypes.float32, (2,), "register"),
            kernel_ir.Array(self._n("running_sum"), dtypes.float32, (2,), "register"),
            kernel_ir.Array(self._n("rescale"), dtypes.float32, (2,), "register"),
            *([kernel_ir.Array(self._n("shown"), dtypes.int32, (self.all_key_blocks,), "shared")]
              if self.a.by_block.shown is not None else []),
            *([kernel_ir.Array(self._n("turn"), dtypes.int64, (2,), "shared")] if self.in_turn else []),
        ]

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        grid = self.tile.grid_shape()
        arrays = self.arrays()
        return kernel_ir.Kernel(
            name=self.kernel.name,
            params=loop_to_kernel.params(self.kernel),
            arrays=arrays,
            body=self.body(),
            launch=kernel_ir.Launch((grid["x"], grid["y"], grid["z"]), (self.consumers, 1, 1),
                                    dynamic_shared_bytes(arrays, static_shared_bytes)),
            tensor_maps=self.tensor_maps(),
        )


LOG2E = ex.const(math.log2(math.e), dtypes.float32)


def _exp(x: Expr, shift_log2: Expr) -> Expr:
    """``exp(x - shift)`` as ``exp2(x * log2(e) - shift * log2(e))``, ``shift_log2`` the latter product."""
    return ex.op("exp2", ex.op("sub", ex.op("mul", x, LOG2E), shift_log2))


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

"""The Kernel IR of the decode schedule: flash-decoding, its products on the CUDA cores as below
or on the tensor cores (``tensor_cores``).

Block ``(x, z)`` takes row group ``x`` (rows ``G x .. G x + G - 1``, which read the same keys
and values) and key range ``z``, ``tiles`` tiles of ``C`` keys::

    stage the G rows' query factors in shared memory, as float32
    cp.async the first S - 1 tiles' keys and values into a ring of S stages (rows padded by
        16 bytes)
    for each tile t:
        cp.async tile t + S - 1 into the stage tile t - 1 used; wait for tile t
        each thread takes a key: its G dot products, then the program's score (scale, mask,
            soft cap) for each row; keys past the last are -inf
        each warp takes rows: the running maximum m raised to the tile's (-inf read as 0 where
            every key so far is masked), p = exp(score - m) rounded as the program rounds the
            probabilities, the running sum l rescaled by exp(old m - m) plus the sum of p
        16-byte runs of a value row per lane, the other lanes on other keys: the lane's sums of
            p * v, first rescaled as l was
    the lanes' sums added across the warp by shuffles, and across warps in shared memory
    one range: out = sum / l through the program's epilogue
    else: m, l and the unscaled sums to scratch memory; the range's counter is raised, and the
        last block of the row group to finish reads every range back through L2 (a warp a row,
        a lane a range, for the weights) and writes
        out = sum_z exp(m_z - M) sum_z / sum_z exp(m_z - M) l_z, M the largest m_z
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, kernel_ir, sizes, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.target import Target
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.attention.decode import tiling
from lamina.plugins.schedules.attention.decode.recognise import COPY_BYTES, DecodeAttention, analyse, row_coordinates
from lamina.plugins.schedules.attention.decode.tensor_cores import TensorCorePhases
from lamina.plugins.schedules.attention.writer import balanced_tree
from lamina.plugins.schedules.contraction.layout import KernelNames, dynamic_shared_bytes

F32 = dtypes.float32
LANES = kernel_ir.WARP_SIZE
FLOAT_RUN = 4
"""Float32 elements of one 16-byte shared-memory read."""


def _declare(name: str, value: Expr, dtype=dtypes.index) -> kernel_ir.Declare:
    return kernel_ir.Declare(name, dtype, value)


class DecodeWriter:
    def __init__(self, tile: tile_ir.TileKernel, d: DecodeAttention):
        self.tile, self.d, self.a, self.kernel = tile, d, d.loops, d.kernel
        self.keys = tile.reduction.step
        self.splits = tile.settings.splits
        self.tiles = tile.settings.tiles_per_range
        self.stages = tile.stages[0].buffers
        self.group = d.group_rows
        self.warps = tiling.THREADS // LANES
        self.row_lanes = tiling.lanes_per_row(d)
        self.key_lanes = LANES // self.row_lanes
        self.tensor_cores = TensorCorePhases(self) if tile.settings.products == "tensor_cores" else None
        self.out_warps = 1 if self.tensor_cores else self.warps
        """The warps whose sums of the values ``warp_out`` holds: each warp's part of every feature
        on the CUDA cores, one for all on the tensor cores (each warp writes its own features)."""
        loop_vars = {loop.var for loop in self.a.rows} | {self.a.key_var, self.a.dot_loop.var,
                                                          self.a.values_loop.var, self.a.feature_loop.var}
        names = KernelNames({b.name for b in self.kernel.inputs + self.kernel.outputs} | loop_vars
                            | {self.a.dot_init.acc, self.a.output_acc, self.a.maximum, self.a.total})
        self.v = {n: ex.Var(names.fresh(n)) for n in (
            "tid", "lane", "warp", "group", "split", "first_key", "i", "key", "part", "row", "j", "t", "s", "stage",
            "lane_group", "in_group", "k_step")}
        self.f = {n: ex.Var(names.fresh(n), F32) for n in ("m", "m_new", "m_used", "l", "p", "w")}
        self.n = {n: names.fresh(n) for n in (
            "k_tile", "v_tile", "q_rows", "scores", "row_max", "row_sum", "warp_out", "dots", "k_run", "v_run", "q_run",
            "sums", "rescale", "split_stats", "split_out", "counters", "done", "last", "range_stats", "pair",
            "combined", "weights", "combined_sum", "s_acc", "o_acc")}

    # --- helpers ----------------------------------------------------------------

    def _rows(self, g: Expr) -> dict[str, Expr]:
        return row_coordinates(self.a.rows, self.v["group"] * self.group + g)

    def _load(self, array: str, idx: tuple[Expr, ...]) -> kernel_ir.Load:
        return kernel_ir.Load(array, idx, F32)

    # --- copies -----------------------------------------------------------------

    def _ragged(self) -> bool:
        """Whether some tile reaches past the last key."""
        return self.splits * self.tiles * self.keys != self.d.keys_extent

    def _copies(self, tile: str, load, width: int, key_var: str, along: str, t: Expr) -> list[kernel_ir.Stmt]:
        """Tile ``t``'s rows of ``load`` (keys or values) into its stage of ``tile``."""
        d, v = self.d, self.v
        runs = width // d.vector
        count = self.keys * runs
        key = v["i"] // runs
        part = v["i"] % runs
        position = v["first_key"] + t * self.keys + key
        env = {**self._rows(ex.const(0)), key_var: position, along: part * d.vector}
        source = loop_to_kernel.translate_expr(load, self.kernel, env)
        copy = kernel_ir.CpAsync(tile, (t % self.stages * self.keys + key, part * d.vector), source.array, source.index,
                                 COPY_BYTES, ex.op("lt", position, d.keys_extent) if self._ragged() else None)
        body = [_declare(v["i"].name, v["j"] * tiling.THREADS + v["tid"]), copy]
        if count % tiling.THREADS:
            body = [body[0], kernel_ir.If(ex.op("lt", v["i"], count), [copy])]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(count / tiling.THREADS)), 1, body,
                              unroll=True)]

    def _tile_copies(self, t: Expr) -> list[kernel_ir.Stmt]:
        d, a = self.d, self.a
        return [*self._copies(self.n["k_tile"], d.keys, d.depth, a.key_var, a.dot_loop.var, t),
                *self._copies(self.n["v_tile"], d.values, d.features, a.values_loop.var, a.feature_loop.var, t)]

    def _query_rows(self) -> list[kernel_ir.Stmt]:
        d, v, a = self.d, self.v, self.a
        count = self.group * d.depth
        g, r = v["i"] // d.depth, v["i"] % d.depth
        value = loop_to_kernel.translate_expr(d.query, self.kernel, {**self._rows(g), a.dot_loop.var: r})
        store = kernel_ir.Store(self.n["q_rows"], (g, r), ex.cast(value, F32))
        body = [_declare(v["i"].name, v["j"] * tiling.THREADS + v["tid"]),
                kernel_ir.If(ex.op("lt", v["i"], count), [store]) if count % tiling.THREADS else store]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(count / tiling.THREADS)), 1, body)]

    # --- scores -----------------------------------------------------------------

    def _scores(self) -> list[kernel_ir.Stmt]:
        d, v, a, n = self.d, self.v, self.a, self.n
        dots = [self._load(n["dots"], (ex.const(g),)) for g in range(self.group)]
        keys = [ex.cast(kernel_ir.Load(n["k_run"], (ex.const(e),), d.dtype), F32) for e in range(d.vector)]
        per_run = []
        for g in range(self.group):
            per_run += [kernel_ir.VectorLoad(n["q_run"], (ex.const(e),), n["q_rows"],
                                             (ex.const(g), v["part"] * d.vector + e), FLOAT_RUN)
                        for e in range(0, d.vector, FLOAT_RUN)]
            for e in range(d.vector):
                query = self._load(n["q_run"], (ex.const(e),))
                per_run.append(kernel_ir.Store(n["dots"], (ex.const(g),),
                                               ex.op("add", dots[g], ex.op("mul", query, keys[e]))))
        dot_loop = kernel_ir.For(v["part"].name, ex.const(0), ex.const(d.depth // d.vector), 1, [
            kernel_ir.VectorLoad(n["k_run"], (ex.const(0),), n["k_tile"], (v["stage"] * self.keys + v["key"],
                                                                            v["part"] * d.vector), d.vector),
            *per_run], unroll=True)
        position = v["first_key"] + v["t"] * self.keys + v["key"]
        scores = []
        for g in range(self.group):
            env = {**self._rows(ex.const(g)), a.key_var: position, a.dot_init.acc: dots[g]}
            score = ex.cast(loop_to_kernel.translate_expr(a.score, self.kernel, env), F32)
            if self._ragged():
                score = ex.op("where", ex.op("lt", position, d.keys_extent), score, ex.const(-math.inf, F32))
            scores.append(kernel_ir.Store(n["scores"], (ex.const(g), v["key"]), score))
        body = [_declare(v["key"].name, v["j"] * tiling.THREADS + v["tid"]),
                *(kernel_ir.Store(n["dots"], (ex.const(g),), ex.const(0.0, F32)) for g in range(self.group)),
                dot_loop, *scores]
        if self.keys % tiling.THREADS:
            body = [body[0], kernel_ir.If(ex.op("lt", v["key"], self.keys), body[1:])]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(self.keys / tiling.THREADS)), 1, body)]

    def _softmax(self) -> list[kernel_ir.Stmt]:
        """Each warp's rows: the running maximum raised to the tile's, the probabilities in place
        of the scores, the running sum rescaled and added to, the rescaling kept for the sums."""
        v, f, n = self.v, self.f, self.n
        rounds = self.keys // LANES
        row = v["row"]
        at = [(row, v["lane"] + LANES * j) for j in range(rounds)]
        scores = [self._load(n["scores"], i) for i in at]
        minus_infinity = ex.const(-math.inf, F32)
        body: list[kernel_ir.Stmt] = [kernel_ir.Declare(f["m"].name, F32, balanced_tree("max", scores))]
        for mask in (16, 8, 4, 2, 1):
            body.append(kernel_ir.Assign(f["m"].name, ex.op("max", f["m"], kernel_ir.ShuffleXor(f["m"], mask))))
        before = v["t"] % 2
        after = 1 - before
        running_max = self._load(n["row_max"], (before, row))
        body.append(kernel_ir.Declare(f["m_new"].name, F32, ex.op("max", running_max, f["m"])))
        body.append(kernel_ir.Declare(f["m_used"].name, F32, ex.op(
            "where", ex.op("eq", f["m_new"], minus_infinity), ex.const(0.0, F32), f["m_new"])))
        body.append(kernel_ir.Declare(f["l"].name, F32, ex.const(0.0, F32)))
        rounding = self.d.loops.rounding
        for j, (i, score) in enumerate(zip(at, scores)):
            p = ex.op("exp", ex.op("sub", score, f["m_used"]))
            body.append(kernel_ir.Declare(f["p"].name, F32, p) if j == 0 else kernel_ir.Assign(f["p"].name, p))
            body.append(kernel_ir.Assign(f["l"].name, ex.op("add", f["l"], f["p"])))
            kept = ex.cast(ex.cast(f["p"], rounding), F32) if rounding is not None else f["p"]
            body.append(kernel_ir.Store(n["scores"], i, kept))
        for mask in (16, 8, 4, 2, 1):
            body.append(kernel_ir.Assign(f["l"].name, ex.op("add", f["l"], kernel_ir.ShuffleXor(f["l"], mask))))
        body.append(kernel_ir.Declare(f["w"].name, F32, ex.op("exp", ex.op("sub", running_max, f["m_used"]))))
        body.append(kernel_ir.If(ex.op("eq", v["lane"], 0), [
            kernel_ir.Store(n["row_max"], (after, row), f["m_new"]),
            kernel_ir.Store(n["row_sum"], (after, row),
                            ex.op("add", ex.op("mul", self._load(n["row_sum"], (before, row)), f["w"]), f["l"])),
            kernel_ir.Store(n["rescale"], (row,), f["w"])]))
        rounds_of_rows = math.ceil(self.group / self.warps)
        pick = _declare(row.name, v["s"] * self.warps + v["warp"])
        guarded = [kernel_ir.If(ex.op("lt", row, self.group), body)] if self.group % self.warps else body
        return [kernel_ir.For(v["s"].name, ex.const(0), ex.const(rounds_of_rows), 1, [pick, *guarded])]

    # --- the values ---------------------------------------------------------------

    def _sums(self) -> list[list[Expr]]:
        d = self.d
        return [[self._load(self.n["sums"], (ex.const(g * d.vector + e),)) for e in range(d.vector)]
                for g in range(self.group)]

    def _values(self) -> list[kernel_ir.Stmt]:
        """Each lane's 16-byte run of the features: its sums rescaled, then p * v added over its keys."""
        d, v, n = self.d, self.v, self.n
        runs = d.features // d.vector
        part = v["lane"] % self.row_lanes
        sums = self._sums()
        rescale = [kernel_ir.Store(n["sums"], (ex.const(g * d.vector + e),),
                                   ex.op("mul", sums[g][e], self._load(n["rescale"], (ex.const(g),))))
                   for g in range(self.group) for e in range(d.vector)]
        add = [kernel_ir.VectorLoad(n["v_run"], (ex.const(0),), n["v_tile"], (v["stage"] * self.keys + v["key"],
                                                                               part * d.vector), d.vector)]
        for g in range(self.group):
            p = self._load(n["scores"], (ex.const(g), v["key"]))
            for e in range(d.vector):
                value = ex.cast(kernel_ir.Load(n["v_run"], (ex.const(e),), d.dtype), F32)
                add.append(kernel_ir.Store(n["sums"], (ex.const(g * d.vector + e),),
                                           ex.op("add", sums[g][e], ex.op("mul", p, value))))
        step = self.warps * self.key_lanes
        walk = kernel_ir.For(v["s"].name, ex.const(0), ex.const(self.keys // step), 1, [
            _declare(v["key"].name, v["s"] * step + v["warp"] * self.key_lanes + v["lane"] // self.row_lanes), *add],
            unroll=True)
        return [*rescale, kernel_ir.If(ex.op("lt", part, runs), [walk]) if runs < self.row_lanes else walk]

    def _warp_sums(self) -> list[kernel_ir.Stmt]:
        """The lanes' sums added over the warp's other keys by shuffles, each warp's to ``warp_out``."""
        d, v, n = self.d, self.v, self.n
        runs = d.features // d.vector
        part = v["lane"] % self.row_lanes
        sums = self._sums()
        out: list[kernel_ir.Stmt] = []
        for mask in [self.row_lanes << k for k in range(int(math.log2(self.key_lanes)))]:
            for g in range(self.group):
                for e in range(d.vector):
                    out.append(kernel_ir.Store(n["sums"], (ex.const(g * d.vector + e),), ex.op(
                        "add", sums[g][e], kernel_ir.ShuffleXor(sums[g][e], mask))))
        keep = [kernel_ir.Store(n["warp_out"], (v["warp"], ex.const(g), part * d.vector + e), sums[g][e])
                for g in range(self.group) for e in range(d.vector)]
        out.append(kernel_ir.If(ex.op("and", ex.op("lt", v["lane"], self.row_lanes), ex.op("lt", part, runs)), keep))
        return out

    def _each_output(self, body, width: int = 1) -> list[kernel_ir.Stmt]:
        """``body(g, feature)`` for each run of ``width`` of the block's outputs, the threads
        taking them in turn."""
        d, v = self.d, self.v
        runs = d.features // width
        count = self.group * runs
        inner = body(v["i"] // runs, v["i"] % runs * width)
        guarded = [kernel_ir.If(ex.op("lt", v["i"], count), inner)] if count % tiling.THREADS else inner
        loop_body = [_declare(v["i"].name, v["j"] * tiling.THREADS + v["tid"]), *guarded]
        return [kernel_ir.For(v["j"].name, ex.const(0), ex.const(math.ceil(count / tiling.THREADS)), 1, loop_body)]

    def _epilogue(self, g: Expr, feature: Expr, value: Expr) -> list[kernel_ir.Stmt]:
        a = self.a
        env = {**self._rows(g), a.feature_loop.var: feature, a.output_acc: value}
        return list(loop_to_kernel.translate_body(a.stores, self.kernel, env))

    def _warp_total(self, g: Expr, feature: Expr) -> Expr:
        return balanced_tree("add", [self._load(self.n["warp_out"], (ex.const(w), g, feature))
                                     for w in range(self.out_warps)])

    def _one_range(self) -> list[kernel_ir.Stmt]:
        def body(g, feature):
            total = self._load(self.n["row_sum"], (ex.const(self.tiles % 2), g))
            return self._epilogue(g, feature, self.a.divided(self._warp_total(g, feature), total))
        return self._each_output(body)

    def _ranges(self) -> list[kernel_ir.Stmt]:
        """Every range's part to scratch memory; the row group's last block combines them."""
        d, v, n = self.d, self.v, self.n
        row = self.v["group"] * self.group

        def part(g, feature):
            at = ((row + g) * self.splits + v["split"]) * d.features + feature
            return [kernel_ir.Store(n["split_out"], (at,), self._warp_total(g, feature))]

        out = self._each_output(part)
        at = 2 * ((row + v["tid"]) * self.splits + v["split"])
        out.append(kernel_ir.If(ex.op("lt", v["tid"], self.group), [
            kernel_ir.Store(n["split_stats"], (at,), self._load(n["row_max"], (ex.const(self.tiles % 2), v["tid"]))),
            kernel_ir.Store(n["split_stats"], (at + 1,), self._load(n["row_sum"],
                                                                    (ex.const(self.tiles % 2), v["tid"])))]))
        int32 = dtypes.int32
        done = kernel_ir.Load(n["done"], (ex.const(0),), int32)
        out += [kernel_ir.ThreadFence(), kernel_ir.Barrier(),
                kernel_ir.If(ex.op("eq", v["tid"], 0), [
                    kernel_ir.AtomicAdd(n["done"], (ex.const(0),), n["counters"], v["group"], ex.const(1, int32)),
                    kernel_ir.Store(n["last"], (ex.const(0),), ex.op("where", ex.op("eq", done, self.splits - 1),
                                                                      ex.const(1, int32), ex.const(0, int32)))]),
                kernel_ir.Barrier()]
        weights = self._range_weights()
        pair = [self._load(n["pair"], (ex.const(e),)) for e in range(2)]
        sums = [self._load(n["combined"], (ex.const(e),)) for e in range(2)]

        def combine(g, feature):
            start = (row + g) * self.splits
            total = self._load(n["combined_sum"], (g,))
            return [
                *(kernel_ir.Store(n["combined"], (ex.const(e),), ex.const(0.0, F32)) for e in range(2)),
                kernel_ir.For(v["s"].name, ex.const(0), ex.const(self.splits), 1, [
                    kernel_ir.VectorLoad(n["pair"], (ex.const(0),), n["split_out"],
                                         ((start + v["s"]) * d.features + feature,), 2, cache="l2"),
                    *(kernel_ir.Store(n["combined"], (ex.const(e),), ex.op("add", sums[e], ex.op(
                        "mul", self._load(n["weights"], (g, v["s"])), pair[e]))) for e in range(2))], unroll=True),
                *self._epilogue(g, feature, self.a.divided(sums[0], total)),
                *self._epilogue(g, feature + 1, self.a.divided(sums[1], total))]

        last = [kernel_ir.ThreadFence(), *weights, kernel_ir.Barrier(), *self._each_output(combine, 2)]
        out.append(kernel_ir.If(ex.op("ne", kernel_ir.Load(n["last"], (ex.const(0),), int32), ex.const(0, int32)),
                                last))
        return out

    def _range_weights(self) -> list[kernel_ir.Stmt]:
        """Each row's range weights ``exp(m_z - M)`` to ``weights`` and its combined sum to
        ``combined_sum``: a warp a row, its lanes reading the ranges' maxima and sums at once (a
        lane every 32nd range) and combining them by shuffles, so that the reads are one trip to L2
        for up to 32 ranges, not one a range (``experiments/decode_combining/``)."""
        v, f, n = self.v, self.f, self.n
        rounds = math.ceil(self.splits / LANES)
        row = v["row"]
        first = (v["group"] * self.group + row) * self.splits
        stats = [[self._load(n["range_stats"], (ex.const(2 * r + e),)) for e in range(2)] for r in range(rounds)]
        body: list[kernel_ir.Stmt] = []
        for r in range(rounds):
            split = v["lane"] + LANES * r
            read = kernel_ir.VectorLoad(n["range_stats"], (ex.const(2 * r),), n["split_stats"],
                                        (2 * (first + split),), 2, cache="l2")
            if (r + 1) * LANES <= self.splits:
                body.append(read)
                continue
            body.append(kernel_ir.If(ex.op("lt", split, self.splits), [read], [
                kernel_ir.Store(n["range_stats"], (ex.const(2 * r),), ex.const(-math.inf, F32)),
                kernel_ir.Store(n["range_stats"], (ex.const(2 * r + 1),), ex.const(0.0, F32))]))
        body.append(kernel_ir.Declare(f["m"].name, F32, balanced_tree("max", [m for m, _ in stats])))
        for mask in (16, 8, 4, 2, 1):
            body.append(kernel_ir.Assign(f["m"].name, ex.op("max", f["m"], kernel_ir.ShuffleXor(f["m"], mask))))
        body += [kernel_ir.Declare(f["m_used"].name, F32, ex.op(
                     "where", ex.op("eq", f["m"], ex.const(-math.inf, F32)), ex.const(0.0, F32), f["m"])),
                 kernel_ir.Declare(f["l"].name, F32, ex.const(0.0, F32))]
        for r, (m, total) in enumerate(stats):
            split = v["lane"] + LANES * r
            weight = ex.op("exp", ex.op("sub", m, f["m_used"]))
            body.append(kernel_ir.Declare(f["w"].name, F32, weight) if r == 0 else kernel_ir.Assign(f["w"].name, weight))
            body.append(kernel_ir.Assign(f["l"].name, ex.op("add", f["l"], ex.op("mul", f["w"], total))))
            store = kernel_ir.Store(n["weights"], (row, split), f["w"])
            body.append(store if (r + 1) * LANES <= self.splits
                        else kernel_ir.If(ex.op("lt", split, self.splits), [store]))
        for mask in (16, 8, 4, 2, 1):
            body.append(kernel_ir.Assign(f["l"].name, ex.op("add", f["l"], kernel_ir.ShuffleXor(f["l"], mask))))
        body.append(kernel_ir.If(ex.op("eq", v["lane"], 0), [kernel_ir.Store(n["combined_sum"], (row,), f["l"])]))
        pick = _declare(row.name, v["s"] * self.warps + v["warp"])
        guarded = [kernel_ir.If(ex.op("lt", row, self.group), body)] if self.group % self.warps else body
        return [kernel_ir.For(v["s"].name, ex.const(0), ex.const(math.ceil(self.group / self.warps)), 1,
                              [pick, *guarded])]

    # --- the kernel -------------------------------------------------------------

    def body(self) -> list[kernel_ir.Stmt]:
        d, v, n = self.d, self.v, self.n
        tid = kernel_ir.thread_idx("x")
        out: list[kernel_ir.Stmt] = [
            _declare(v["tid"].name, tid),
            _declare(v["lane"].name, v["tid"] % LANES),
            _declare(v["warp"].name, v["tid"] // LANES),
            _declare(v["group"].name, kernel_ir.block_idx("x")),
            _declare(v["split"].name, kernel_ir.block_idx("z")),
            _declare(v["first_key"].name, v["split"] * (self.tiles * self.keys)),
        ]
        start = [kernel_ir.Store(n["row_max"], (ex.const(0), v["tid"]), ex.const(-math.inf, F32)),
                 kernel_ir.Store(n["row_sum"], (ex.const(0), v["tid"]), ex.const(0.0, F32))]
        tensor_cores = self.tensor_cores
        if tensor_cores:
            out += [*tensor_cores.lane_coordinates(), *tensor_cores.start(),
                    kernel_ir.If(ex.op("lt", v["tid"], self.group), start)]
        else:
            out += [*self._query_rows(), kernel_ir.If(ex.op("lt", v["tid"], self.group), start),
                    *(kernel_ir.Store(n["sums"], (ex.const(i),), ex.const(0.0, F32))
                      for i in range(self.group * d.vector))]
        for t in range(self.stages - 1):
            if sizes.is_symbolic(self.tiles):  # a range's tiles counted at run time: as many as the cache needs
                out += [kernel_ir.If(ex.op("lt", ex.const(t), self.tiles), self._tile_copies(ex.const(t))),
                        kernel_ir.CpAsyncCommit()]
                continue
            out += [*(self._tile_copies(ex.const(t)) if t < self.tiles else []), kernel_ir.CpAsyncCommit()]
        tile = [
            _declare(v["stage"].name, v["t"] % self.stages),
            kernel_ir.If(ex.op("lt", v["t"] + self.stages - 1, self.tiles),
                         self._tile_copies(v["t"] + self.stages - 1)),
            kernel_ir.CpAsyncCommit(),
            kernel_ir.CpAsyncWait(self.stages - 1),
            kernel_ir.Barrier(),
            *(tensor_cores.scores() if tensor_cores else self._scores()),
            kernel_ir.Barrier(),
            *self._softmax(),
            kernel_ir.Barrier(),
            *(tensor_cores.values() if tensor_cores else self._values()),
            kernel_ir.Barrier(),
        ]
        out += [kernel_ir.For(v["t"].name, ex.const(0), ex.const(self.tiles), 1, tile),
                *(tensor_cores.warp_sums() if tensor_cores else self._warp_sums()),
                kernel_ir.Barrier()]
        return out + (self._one_range() if self.splits == 1 else self._ranges())

    def arrays(self) -> list[kernel_ir.Array]:
        d, n = self.d, self.n
        arrays = [
            kernel_ir.Array(n["k_tile"], d.dtype, (self.stages * self.keys, tiling.padded(d, d.depth)), "shared"),
            kernel_ir.Array(n["v_tile"], d.dtype, (self.stages * self.keys, tiling.padded(d, d.features)),
                            "shared"),
            kernel_ir.Array(n["row_max"], F32, (2, self.group), "shared"),
            kernel_ir.Array(n["row_sum"], F32, (2, self.group), "shared"),
        ]
        if self.tensor_cores:
            arrays += self.tensor_cores.arrays()
        else:
            arrays += [
                kernel_ir.Array(n["q_rows"], F32, (self.group, d.depth), "shared"),
                kernel_ir.Array(n["scores"], F32, (self.group, self.keys), "shared"),
                kernel_ir.Array(n["rescale"], F32, (self.group,), "shared"),
                kernel_ir.Array(n["warp_out"], F32, (self.warps, self.group, d.features), "shared"),
                kernel_ir.Array(n["dots"], F32, (self.group,), "register"),
                kernel_ir.Array(n["k_run"], d.dtype, (d.vector,), "register"),
                kernel_ir.Array(n["q_run"], F32, (d.vector,), "register"),
                kernel_ir.Array(n["v_run"], d.dtype, (d.vector,), "register"),
                kernel_ir.Array(n["sums"], F32, (self.group * d.vector,), "register"),
            ]
        if self.splits > 1:
            arrays += [kernel_ir.Array(n["done"], dtypes.int32, (1,), "register"),
                       kernel_ir.Array(n["last"], dtypes.int32, (1,), "shared"),
                       kernel_ir.Array(n["range_stats"], F32, (2 * math.ceil(self.splits / LANES),), "register"),
                       kernel_ir.Array(n["pair"], F32, (2,), "register"),
                       kernel_ir.Array(n["combined"], F32, (2,), "register"),
                       kernel_ir.Array(n["weights"], F32, (self.group, self.splits), "shared"),
                       kernel_ir.Array(n["combined_sum"], F32, (self.group,), "shared")]
        return arrays

    def params(self) -> list[kernel_ir.Param]:
        params = list(loop_to_kernel.params(self.kernel))
        if self.splits > 1:
            d, n = self.d, self.n
            ranges = d.rows_extent * self.splits
            params += [kernel_ir.Param(n["split_stats"], F32, 2 * ranges, writable=True, scratch=True, zeroed=False),
                       kernel_ir.Param(n["split_out"], F32, ranges * d.features, writable=True, scratch=True,
                                       zeroed=False),
                       kernel_ir.Param(n["counters"], dtypes.int32, d.row_groups, writable=True, scratch=True)]
        return params

    def kernel_ir(self, static_shared_bytes: int) -> kernel_ir.Kernel:
        arrays = self.arrays()
        return kernel_ir.Kernel(
            name=self.kernel.name, params=self.params(), arrays=arrays, body=self.body(),
            launch=kernel_ir.Launch((self.d.row_groups, 1, self.splits), (tiling.THREADS, 1, 1),
                                    dynamic_shared_bytes(arrays, static_shared_bytes)),
            sizes=loop_to_kernel.size_params(self.kernel))


def lower_decode_attention(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    kernel = DecodeWriter(tile, analyse(tile.kernel)).kernel_ir(target.max_shared_bytes_per_block)
    kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
    return kernel

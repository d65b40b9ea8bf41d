"""An input the program updates is written in place where no kernel reads its old value after."""

from __future__ import annotations

import textwrap

from lamina.core.ir import dtypes, expr as ex, loop_ir
from lamina.core.ir.loop_ir import Buffer, Kernel, Load, Loop, Program, Store
from lamina.core.ir.torch_ir import TensorType
from lamina.core.stages.update_in_place import write_updates_in_place

CACHE = Buffer("cache", TensorType((2, 5, 4), dtypes.float32))
POSITION = Buffer("position", TensorType((1,), dtypes.int64))
VALUES = Buffer("values", TensorType((2, 1, 4), dtypes.float32))
NEW = Buffer("new", TensorType((2, 5, 4), dtypes.float32))
TOTAL = Buffer("total", TensorType((2, 4), dtypes.float32))
CHANGE = Buffer("change", TensorType((2, 5, 4), dtypes.float32))


def nest(extents, store):
    body = (store,)
    for var, extent in reversed(list(zip(("i0", "i1", "i2"), extents))):
        body = (Loop(var, extent, "parallel", body),)
    return body


def update(condition=None, old_index=None) -> Kernel:
    """``new = where(i1 == position[0], values[i0, 0, i2], cache)``."""
    i0, i1, i2 = (ex.Var(v) for v in ("i0", "i1", "i2"))
    position = Load("position", (ex.const(0),), dtypes.int64)
    condition = ex.op("eq", ex.cast(i1, dtypes.int64), position) if condition is None else condition
    value = ex.op("where", condition, Load("values", (i0, ex.const(0), i2), dtypes.float32),
                  Load("cache", old_index or (i0, i1, i2), dtypes.float32))
    return Kernel("update", (POSITION, VALUES, CACHE), (NEW,), nest((2, 5, 4), Store("new", (i0, i1, i2), value)))


def total(read: str = "new") -> Kernel:
    i0, i2, r0 = ex.Var("i0"), ex.Var("i2"), ex.Var("r0")
    body = (Loop("i0", 2, "parallel", (Loop("i2", 4, "parallel", (
        loop_ir.Init("acc0", ex.const(0.0, dtypes.float32)),
        Loop("r0", 5, "reduce", (loop_ir.Accumulate("acc0", "sum", Load(read, (i0, r0, i2), dtypes.float32)),)),
        Store("total", (i0, i2), ex.Var("acc0", dtypes.float32)),
    )),)),)
    return Kernel("total", (CACHE if read == "cache" else NEW,), (TOTAL,), body)


def program(*kernels: Kernel) -> Program:
    return Program((CACHE, POSITION, VALUES), (TOTAL, NEW), (), kernels)


def test_one_written_position_is_stored_alone_into_the_input():
    written = write_updates_in_place(program(update(), total()), [("cache", "new")])
    loop_ir.verify_program(written)
    assert [b.name for b in written.outputs] == ["total", "cache"]
    assert loop_ir.format_program(written) == textwrap.dedent("""\
        loop_program(cache: f32[2, 5, 4], position: i64[1], values: f32[2, 1, 4]) -> (total: f32[2, 4], cache: f32[2, 5, 4]):
          kernel update(position: i64[1], values: f32[2, 1, 4]) -> (cache: f32[2, 5, 4]):
            for i0 in parallel(2):
              for i2 in parallel(4):
                cache[i0, min(max(position[0], 0), 4), i2] = where(position[0] >= 0 and position[0] < 5, values[i0, 0, i2], cache[i0, min(max(position[0], 0), 4), i2])
          kernel total(cache: f32[2, 5, 4]) -> (total: f32[2, 4]):
            for i0 in parallel(2):
              for i2 in parallel(4):
                acc0: f32 = 0.0
                for r0 in reduce(5):
                  acc0 += cache[i0, r0, i2]
                total[i0, i2] = acc0""")


def test_a_new_value_of_every_element_is_written_into_the_input_whole():
    """Not one position (the condition reads the coordinate twice): every element is stored, in place."""
    i1 = ex.cast(ex.Var("i1"), dtypes.int64)
    condition = ex.op("lt", i1, Load("position", (ex.const(0),), dtypes.int64))
    written = write_updates_in_place(program(update(condition), total()), [("cache", "new")])
    store = next(s for s in loop_ir.statements(written.kernels[0].body) if isinstance(s, Store))
    assert store.buffer == "cache" and [str(e) for e in store.index] == ["i0", "i1", "i2"]
    assert written.kernels[1].inputs == (CACHE,)


def test_an_input_read_beside_its_new_value_is_not_written_in_place():
    """``change`` reads the old cache and the new one: the update can move neither before nor after it."""
    i0, i1, i2 = (ex.Var(v) for v in ("i0", "i1", "i2"))
    value = ex.op("sub", Load("new", (i0, i1, i2), dtypes.float32), Load("cache", (i0, i1, i2), dtypes.float32))
    change = Kernel("change", (NEW, CACHE), (CHANGE,), nest((2, 5, 4), Store("change", (i0, i1, i2), value)))
    original = Program((CACHE, POSITION, VALUES), (CHANGE, NEW), (), (update(), change))
    loop_ir.verify_program(original)
    assert write_updates_in_place(original, [("cache", "new")]) == original


def test_an_input_read_at_another_element_than_the_one_written_is_not_written_in_place():
    """``new[i0, i1, i2]`` reading ``cache[i0, 4 - i1, i2]`` would read elements already overwritten."""
    original = program(update(old_index=(ex.Var("i0"), 4 - ex.Var("i1"), ex.Var("i2"))), total())
    assert write_updates_in_place(original, [("cache", "new")]) == original


def counter() -> Kernel:
    """``moved = cache + 1``, which no kernel reads: a counter that each step moves on."""
    i0, i1, i2 = (ex.Var(v) for v in ("i0", "i1", "i2"))
    value = ex.op("add", Load("cache", (i0, i1, i2), dtypes.float32), ex.const(1.0, dtypes.float32))
    return Kernel("counter", (CACHE,), (NEW,), nest((2, 5, 4), Store("new", (i0, i1, i2), value)))


def test_a_new_value_nothing_reads_is_written_after_the_last_reader_of_the_old_one():
    written = write_updates_in_place(program(counter(), total("cache")), [("cache", "new")])
    loop_ir.verify_program(written)
    assert [k.name for k in written.kernels] == ["total", "counter"]
    assert written.kernels[1].outputs == (CACHE,) and written.kernels[0].inputs == (CACHE,)


def counters_program(second_reads_first: bool) -> Program:
    """Two layers, each reading a counter of its own (as a decoding step's cache position) and
    moving it on; with ``second_reads_first``, the second layer reads the first's moved counter."""
    c0, c1 = (Buffer(name, TensorType((), dtypes.int64)) for name in ("c0", "c1"))
    new0, new1 = (Buffer(name, TensorType((), dtypes.int64)) for name in ("new0", "new1"))
    x, out0, out1 = (Buffer(name, TensorType((4,), dtypes.float32)) for name in ("x", "out0", "out1"))
    i0 = ex.Var("i0")

    def counted(name, read, moved):
        return Kernel(f"count_{read.name}", (read,), (moved,),
                      (Store(moved.name, (), ex.op("add", Load(read.name, (), dtypes.int64), ex.const(1, dtypes.int64))),))

    def layer(name, source, counters):
        value = Load(source.name, (i0,), dtypes.float32)
        for counter in counters:
            value = ex.op("add", value, ex.cast(Load(counter.name, (), dtypes.int64), dtypes.float32))
        return Kernel(name.name, (source, *counters), (name,), (Loop("i0", 4, "parallel", (Store(name.name, (i0,), value),)),))

    second = layer(out1, out0, (c1, new0) if second_reads_first else (c1,))
    kernels = (layer(out0, x, (c0,)), counted("count0", c0, new0), second, counted("count1", c1, new1))
    return Program((x, c0, c1), (out1, new0, new1), (out0,), kernels)


def test_counters_that_nothing_reads_after_are_moved_on_at_the_end_in_one_kernel():
    written = write_updates_in_place(counters_program(False), [("c0", "new0"), ("c1", "new1")])
    loop_ir.verify_program(written)
    assert [k.name for k in written.kernels] == ["out0", "out1", "count_c0"]
    last = written.kernels[-1]
    assert [b.name for b in last.outputs] == ["c0", "c1"]
    assert [s.buffer for s in last.body] == ["c0", "c1"]


def test_a_counter_read_after_it_moves_on_stays_where_it_is():
    written = write_updates_in_place(counters_program(True), [("c0", "new0"), ("c1", "new1")])
    loop_ir.verify_program(written)
    assert [k.name for k in written.kernels] == ["out0", "count_c0", "out1", "count_c1"]



VALUE_CACHE = Buffer("value_cache", CACHE.type)
NEW_VALUES = Buffer("new_values", CACHE.type)


def values_update(read: Buffer = VALUES) -> Kernel:
    """``new_values = where(j1 == position[0], read[j0, 0, j2], value_cache)``, in loops of its own names."""
    j0, j1, j2 = (ex.Var(v) for v in ("j0", "j1", "j2"))
    position = Load("position", (ex.const(0),), dtypes.int64)
    value = ex.op("where", ex.op("eq", ex.cast(j1, dtypes.int64), position),
                  Load(read.name, (j0, ex.const(0), j2), dtypes.float32),
                  Load("value_cache", (j0, j1, j2), dtypes.float32))
    body = (Store("new_values", (j0, j1, j2), value),)
    for var, extent in reversed(list(zip(("j0", "j1", "j2"), (2, 5, 4)))):
        body = (Loop(var, extent, "parallel", body),)
    return Kernel("update_values", (POSITION, read, VALUE_CACHE), (NEW_VALUES,), body)


def keys_and_values(values: Kernel) -> Program:
    """A decoding step's cache writes: new keys, then new values, each at the position of its cache."""
    return Program((CACHE, POSITION, VALUES, VALUE_CACHE), (TOTAL, NEW, NEW_VALUES), (),
                   (update(), values, total("new")))


def test_adjacent_writes_at_a_position_are_one_kernel_storing_both():
    written = write_updates_in_place(keys_and_values(values_update()), [("cache", "new"), ("value_cache", "new_values")])
    loop_ir.verify_program(written)
    assert [k.name for k in written.kernels] == ["update", "total"]
    joined = written.kernels[0]
    assert [b.name for b in joined.outputs] == ["cache", "value_cache"]
    (stores,) = {tuple(s for s in loop_ir.statements(joined.body) if isinstance(s, Store))}
    assert [s.buffer for s in stores] == ["cache", "value_cache"]
    assert all(ex.free_vars(e) <= {"i0", "i2"} | {"position"} for s in stores for e in s.index)


def test_a_write_that_reads_what_the_write_before_it_writes_stays_apart():
    written = write_updates_in_place(keys_and_values(values_update(read=NEW)), [("cache", "new"), ("value_cache", "new_values")])
    loop_ir.verify_program(written)
    assert [k.name for k in written.kernels] == ["update", "update_values", "total"]


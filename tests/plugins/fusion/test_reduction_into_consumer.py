"""When a reduction runs inside its reader, when a reader stores a program output, and
when they must not: a matmul or a reduction is never computed twice, and a matmul keeps
its shape."""

import torch

import lamina
from lamina.backends.cuda.targets import SM90
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import expr as ex, loop_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import plugin
from tests.core.stages import tensor_programs as tp


def fused(program):
    rules = []
    plugin.lamina_register_fusion_rules(rules.append)
    return fuse(lower_to_loops(program), sorted(rules, key=lambda r: (-r.priority, r.name)), SM90, {})


def reduce_loops(program):
    return [s for k in program.kernels for s in loop_ir.statements(k.body) if isinstance(s, loop_ir.Loop) and s.kind == "reduce"]


def lines(kernel):
    return [line.strip() for line in loop_ir.format_kernel(kernel).splitlines()]


def test_a_matmul_read_by_a_broadcast_stays_a_matmul():
    b = tp.TensorProgramBuilder()
    a, w, z = b.input("a", 4, 6), b.input("w", 6, 5), b.input("z", 4, 5, 3)
    wide = b.index_map(tp.matmul(b, a, w), (4, 5, 3), lambda d: (d[0], d[1]))
    program = fused(b.program(b.elementwise("scaled", tp.mul, wide, z)))
    assert [k.name for k in program.kernels] == ["sum", "scaled"]
    assert [b.name for b in program.temporaries] == ["sum"]


def test_a_matmul_read_by_two_kernels_is_stored_by_the_first_as_it_computes_its_epilogue():
    b = tp.TensorProgramBuilder()
    y = tp.matmul(b, b.input("a", 4, 6), b.input("w", 6, 5))
    relu = b.elementwise("relu", lambda v: ex.op("max", v, 0.0), y)
    double = b.elementwise("double", lambda v: tp.mul(v, 2.0), y)
    program = fused(b.program(relu, double))
    first, second = program.kernels
    assert lines(first)[-2:] == ["sum[i0, i1] = acc0", "relu[i0, i1] = max(acc0, 0.0)"]
    assert [b.name for b in second.inputs] == ["sum"]
    assert len(reduce_loops(program)) == 1


def test_two_matmuls_multiplied_fuse_the_product_into_one_of_them():
    b = tp.TensorProgramBuilder()
    a, w1, w2 = b.input("a", 5, 8), b.input("w1", 8, 6), b.input("w2", 8, 6)
    gate, up = tp.matmul(b, a, w1), tp.matmul(b, a, w2)
    program = fused(b.program(b.elementwise("product", tp.mul, gate, up)))
    first, second = program.kernels
    assert [len([s for s in loop_ir.statements(k.body) if isinstance(s, loop_ir.Init)]) for k in program.kernels] == [1, 1]
    assert first.outputs[0].name in {b.name for b in second.inputs}


def test_a_reduction_read_at_two_indices_is_left_alone():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 6)
    total = b.reduce(x, (1,), "sum", keepdim=True)
    flipped = b.index_map(total, (4, 6), lambda d: (3 - d[0], 0), base="flip")
    widened = b.index_map(total, (4, 6), lambda d: (d[0], 0))
    program = fused(b.program(b.elementwise("add", tp.add, flipped, widened)))
    assert [k.name for k in program.kernels] == ["sum", "add"]


def test_a_full_reduction_is_not_run_by_one_thread_of_its_broadcast_reader():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 4, 6)
    total = b.reduce(x, (0, 1), "sum", keepdim=True)
    widened = b.index_map(total, (4, 6), lambda d: (0, 0))
    program = fused(b.program(b.elementwise("sub", lambda a, s: ex.op("sub", a, s), x, widened)))
    assert [k.name for k in program.kernels] == ["sum", "sub"]


def test_an_output_read_only_inside_a_reduction_keeps_its_kernel():
    b = tp.TensorProgramBuilder()
    x, y = b.input("x", 4, 6), b.input("y", 4, 6)
    h = b.elementwise("h", tp.add, x, y)
    program = fused(b.program(h, b.reduce(h, (1,), "sum")))
    assert [k.name for k in program.kernels] == ["h", "sum"]


def test_a_residual_stream_read_again_later_is_stored_by_the_norm_and_read_from_memory_after():
    b = tp.TensorProgramBuilder()
    x, attn, w = b.input("x", 5, 8), b.input("attn", 5, 8), b.input("w", 8, 3)
    h = b.elementwise("h", tp.add, x, attn)
    total = b.reduce(b.elementwise("square", lambda a: tp.mul(a, a), h), (1,), "sum", keepdim=True)
    normed = b.elementwise("normed", lambda a, s: ex.op("mul", a, ex.op("rsqrt", s)), h,
                           b.index_map(total, (5, 8), lambda d: (d[0], 0)))
    program = fused(b.program(h, normed, tp.matmul(b, h, w)))
    norm, projection = program.kernels
    assert [b.name for b in norm.outputs] == ["h", "normed"]
    assert "h" in {b.name for b in projection.inputs}
    assert len(reduce_loops(program)) == 2


def test_a_lookup_read_by_several_kernels_is_written_once_and_a_matmul_reads_it_as_an_operand():
    def lookup_project_add(ids, table, w):
        h = torch.nn.functional.embedding(ids, table) * 2.0
        return h @ w + h

    ids, table, w = torch.randint(0, 10, (13,)), torch.randn(10, 24), torch.randn(24, 24)
    compiled = lamina.compile(lookup_project_add, (ids, table, w))
    assert [t.schedule for t in compiled.compilation.tiles] == ["pointwise", "contraction"]
    assert relative_error(compiled(ids, table, w), float64_reference(lookup_project_add, (ids, table, w))) < 1e-5

"""The kernels of a transformer layer after fusion: how many, what shape, and right.

Programs run through ``lamina.compile`` on CPU tensors (the Kernel IR simulator) and
are checked against eager PyTorch; the golden printouts start from Tensor IR written by
hand so that they do not depend on how the frontend decomposes an op.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import loop_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import plugin
from lamina.plugins.fusion.analysis import parallel_nest
from lamina.plugins.schedules.matmul_row_reduction.tiling import MAX_CLUSTER_ROW_LENGTH
from tests.plugins.fusion import row_programs

S, H, F_, D = 13, 72, 40, 24
EPS = 1e-6


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def softmax(x):
    return torch.softmax(x, -1)


def add_rms_norm(x, attn_out, w):
    h = x + attn_out
    return h, rms_norm(h, w)


def swiglu(a, w1, w2):
    return F.silu(a @ w1) * (a @ w2)


def linear_bias_residual(x, w, b, residual):
    return F.linear(x, w, b) + residual


def causal_scores(q, k):
    scores = q @ k.transpose(-1, -2) * (1 / math.sqrt(q.shape[-1]))
    mask = torch.triu(torch.full((q.shape[-2], q.shape[-2]), float("-inf")), diagonal=1)
    return torch.softmax(scores + mask, -1)


def causal_attention(q, k, v):
    return causal_scores(q, k) @ v


def centred_and_scaled(x):
    total = x.sum(-1, keepdim=True)
    return x - total, x * total


def norm_then_projection(x, w, proj):
    return rms_norm(x, w) @ proj


def rotary_scores(q, k, cos, sin):
    def rotated(x):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin
    return rotated(q) @ rotated(k).transpose(-1, -2)


PROGRAMS = {
    "rms_norm": (rms_norm, lambda: (torch.randn(S, H), torch.randn(H))),
    "softmax": (softmax, lambda: (torch.randn(S, H),)),
    "add_rms_norm": (add_rms_norm, lambda: (torch.randn(S, H), torch.randn(S, H), torch.randn(H))),
    "swiglu": (swiglu, lambda: (torch.randn(S, H), torch.randn(H, F_), torch.randn(H, F_))),
    "linear_bias_residual": (
        linear_bias_residual, lambda: (torch.randn(S, H), torch.randn(H, H), torch.randn(H), torch.randn(S, H)),
    ),
    "causal_scores": (causal_scores, lambda: (torch.randn(2, S, D), torch.randn(2, S, D))),
    "causal_attention": (causal_attention, lambda: (torch.randn(2, S, D), torch.randn(2, S, D), torch.randn(2, S, D))),
    "centred_and_scaled": (centred_and_scaled, lambda: (torch.randn(S, H),)),
    "norm_then_projection": (norm_then_projection, lambda: (torch.randn(S, H), torch.randn(H), torch.randn(H, F_))),
    "rotary_scores": (
        rotary_scores, lambda: (torch.randn(2, S, D), torch.randn(2, S, D), torch.randn(S, D), torch.randn(S, D)),
    ),
}

_compiled = {}


def compiled(name):
    """The program compiled once per test run (inputs of the same shapes, fresh values, per test)."""
    if name not in _compiled:
        fn, inputs = PROGRAMS[name]
        _compiled[name] = lamina.compile(fn, inputs())
    return _compiled[name]


def reduce_loops(kernel):
    return [s for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Loop) and s.kind == "reduce"]


def schedules(program):
    return [t.schedule for t in program.compilation.tiles]


@pytest.mark.parametrize("name", PROGRAMS)
def test_fused_program_matches_pytorch_on_the_simulator(name):
    fn, inputs = PROGRAMS[name]
    args = inputs()
    out = compiled(name)(*args)
    expected = float64_reference(fn, args)
    if isinstance(expected, torch.Tensor):
        out, expected = (out,), (expected,)
    assert len(out) == len(expected)
    for got, want in zip(out, expected):
        assert relative_error(got, want) < 1e-5


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_kernel_compiles_for_sm_90_without_spills(name):
    program = compiled(name)
    for kernel in program.compilation.kernels.kernels:
        result = compile_kernel(program.compilation.sources[kernel.name], kernel.name, kernel_arch(kernel, "sm_90"))
        assert result.registers > 0
        assert (result.spill_stores, result.spill_loads) == (0, 0), kernel.name


def test_rms_norm_is_one_kernel_with_one_pass_to_reduce_and_one_to_normalise():
    program = compiled("rms_norm")
    (kernel,) = program.compilation.loop.kernels
    assert program.compilation.loop.temporaries == ()
    loops, inner = parallel_nest(kernel)
    assert [(loop.kind, loop.extent) for loop in loops] == [("parallel", S)]
    assert [type(s).__name__ for s in inner] == ["Init", "Loop", "Loop"]
    assert [(s.kind, s.extent) for s in inner[1:]] == [("reduce", H), ("serial", H)]


def test_softmax_is_one_kernel_with_its_max_and_sum_in_one_row_loop():
    program = compiled("softmax")
    (kernel,) = program.compilation.loop.kernels
    loops, inner = parallel_nest(kernel)
    assert [(loop.kind, loop.extent) for loop in loops] == [("parallel", S)]
    assert [s.op for s in loop_ir.statements(kernel.body) if isinstance(s, loop_ir.Accumulate)] == ["max", "sum"]
    assert [s.kind for s in inner if isinstance(s, loop_ir.Loop)] == ["reduce", "reduce", "serial"]


def test_residual_add_fuses_into_the_norm_which_also_stores_the_sum():
    program = compiled("add_rms_norm")
    (kernel,) = program.compilation.loop.kernels
    assert [b.name for b in kernel.outputs] == [b.name for b in program.compilation.loop.outputs]
    assert {b.name for b in kernel.inputs} == {"x", "attn_out", "w"}
    assert len(reduce_loops(kernel)) == 1


def test_swiglu_is_two_matmuls_with_the_product_in_the_epilogue_of_one():
    program = compiled("swiglu")
    first, second = program.compilation.loop.kernels
    assert [len(reduce_loops(k)) for k in (first, second)] == [1, 1]
    assert first.outputs[0].name in {b.name for b in second.inputs}
    assert schedules(program) == ["contraction", "contraction"]


def test_linear_with_bias_and_residual_is_one_contraction():
    program = compiled("linear_bias_residual")
    assert program.kernel_count == 1
    assert schedules(program) == ["contraction"]


def test_causal_scores_are_one_kernel_that_computes_each_score_where_the_softmax_reads_it():
    """Every loop of the softmax over a row computes its score (a dot product over d), which
    the matmul_row_reduction schedule computes once and keeps in registers."""
    program = compiled("causal_scores")
    (probabilities,) = program.compilation.loop.kernels
    assert schedules(program) == ["matmul_row_reduction"]
    row_loops = [s for s in parallel_nest(probabilities)[1] if isinstance(s, loop_ir.Loop)]
    dots = [[s for s in loop_ir.statements(loop.body) if isinstance(s, loop_ir.Loop)] for loop in row_loops]
    assert [loop.kind for loop in row_loops] == ["reduce", "reduce", "serial"]
    assert [[(d.kind, d.extent) for d in found] for found in dots] == [[("reduce", D)]] * 3
    assert program.compilation.loop.temporaries == ()


def test_causal_scores_with_rows_longer_than_a_cluster_holds_are_a_matmul_then_one_softmax_kernel():
    q, k = torch.randn(1, MAX_CLUSTER_ROW_LENGTH + 1, 4), torch.randn(1, MAX_CLUSTER_ROW_LENGTH + 1, 4)
    program = lamina.compile(causal_scores, (q, k))
    scores, probabilities = program.compilation.loop.kernels
    assert schedules(program) == ["contraction", "row_reduction"]
    assert len(reduce_loops(scores)) == 1 and len(reduce_loops(probabilities)) == 2
    assert scores.outputs[0].name in {b.name for b in probabilities.inputs}


def test_causal_attention_is_two_matmuls_around_the_softmax_statistics():
    """The normalisation of the probabilities is a prologue of the second matmul, which
    reads the row max and sum that one kernel computed; no reduction runs twice."""
    program = compiled("causal_attention")
    scores, statistics, output = program.compilation.loop.kernels
    assert schedules(program) == ["contraction", "row_reduction", "contraction"]
    assert [s.op for s in loop_ir.statements(statistics.body) if isinstance(s, loop_ir.Accumulate)] == ["max", "sum"]
    assert len(statistics.outputs) == 2
    assert {b.name for b in statistics.outputs} <= {b.name for b in output.inputs}
    assert [len(reduce_loops(k)) for k in (scores, statistics, output)] == [1, 2, 1]


def test_a_reduction_read_by_two_kernels_is_computed_once():
    program = compiled("centred_and_scaled")
    first, second = program.compilation.loop.kernels
    assert [len(reduce_loops(k)) for k in (first, second)] == [1, 0]
    (total,) = [b.name for b in first.outputs if b.type.shape == (S, 1)]
    assert total in {b.name for b in second.inputs}


def test_a_norm_read_by_a_matmul_prologue_leaves_the_matmul_a_contraction():
    program = compiled("norm_then_projection")
    norm, projection = program.compilation.loop.kernels
    assert schedules(program) == ["row_reduction", "contraction"]
    assert [len(reduce_loops(k)) for k in (norm, projection)] == [1, 1]


def test_the_norm_of_one_token_is_one_kernel_that_keeps_its_row_in_registers():
    """A one-row sum reads ``[0, 0]``, following no loop of its reader: it still runs first,
    inside the reader, and the reader's loop over the row turns serial."""
    x, w = torch.randn(1, H), torch.randn(H)
    program = lamina.compile(rms_norm, (x, w))
    assert program.kernel_count == 1
    assert schedules(program) == ["row_reduction"]
    assert dict(program.compilation.tiles[0].knobs)["row_in_registers"] is True
    assert relative_error(program(x, w), float64_reference(rms_norm, (x, w))) < 1e-6


def test_a_one_row_sum_stays_apart_from_a_reader_too_large_for_one_block():
    """Taken in, the sum makes its reader one row: fine for a token's 2000 features, one
    block's work; for 20000 the reader keeps its parallel loop and reads the stored sum."""
    def normalised(x):
        return x / x.sum(-1, keepdim=True)

    small = lamina.compile(normalised, (torch.randn(1, 2000),))
    large = lamina.compile(normalised, (torch.randn(1, 20000),))
    assert (small.kernel_count, large.kernel_count) == (1, 2)


def test_rotated_operands_are_stored_before_the_matmul_reads_them():
    """RoPE reads its input at two points (the rotated half): inlined into a matmul's
    operand, each would be a tile of its own to stage, so each rotation is one kernel."""
    program = compiled("rotary_scores")
    rotate_q, rotate_k, scores = program.compilation.loop.kernels
    assert schedules(program) == ["pointwise", "pointwise", "contraction"]
    assert {rotate_q.outputs[0].name, rotate_k.outputs[0].name} == {b.name for b in scores.inputs}


# --- golden Loop IR, from Tensor IR written by hand ----------------------------


def builtin_rules():
    rules = []
    plugin.lamina_register_fusion_rules(rules.append)
    return sorted(rules, key=lambda r: (-r.priority, r.name))


RMS_NORM_LOOP_IR = """\
loop_program(x: f32[13, 72], w: f32[72]) -> (out: f32[13, 72]):
  kernel out(x: f32[13, 72], w: f32[72]) -> (out: f32[13, 72]):
    for i0 in parallel(13):
      acc0: f32 = 0.0
      for r0 in reduce(72):
        acc0 += x[i0, r0] * x[i0, r0]
      for i1 in serial(72):
        out[i0, i1] = x[i0, i1] * rsqrt(acc0 * 0.013888888888888888 + 1e-06) * w[i1]"""

SOFTMAX_LOOP_IR = """\
loop_program(x: f32[13, 72]) -> (out: f32[13, 72]):
  kernel out(x: f32[13, 72]) -> (out: f32[13, 72]):
    for i0 in parallel(13):
      acc0: f32 = -inf
      for r0 in reduce(72):
        acc0 = max(acc0, x[i0, r0])
      acc1: f32 = 0.0
      for r1 in reduce(72):
        acc1 += exp(x[i0, r1] - acc0)
      for i1 in serial(72):
        out[i0, i1] = exp(x[i0, i1] - acc0) / acc1"""


def test_rms_norm_loop_ir_golden():
    program = fuse(lower_to_loops(row_programs.rms_norm(S, H).program), builtin_rules(), SM_90, {})
    assert loop_ir.format_program(program) == RMS_NORM_LOOP_IR


def test_softmax_loop_ir_golden():
    program = fuse(lower_to_loops(row_programs.softmax(S, H).program), builtin_rules(), SM_90, {})
    assert loop_ir.format_program(program) == SOFTMAX_LOOP_IR

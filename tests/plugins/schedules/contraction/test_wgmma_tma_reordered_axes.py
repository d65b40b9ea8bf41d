"""A temporary stored with its axes in the order in which a matmul reads it K-major.

Attention written out as products (T5's, a model's eager attention) leaves its output as
(batch, heads, positions, features); the output projection sums over heads and features
together. The rule stores that output position by position, (batch, positions, heads,
features), so that the projection runs on the TMA GEMM; the simulator checks the numbers
against float64 on 70 positions, which no tile divides.
"""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error

TMA = "wgmma 16-bit tma"
SMALL = {"contraction": {"block_m": 64, "block_n": 64, "stages": 2, "consumer_warpgroups": 1}}
FEATURES = 64


def attention_output(x, wq, wk, wv):
    """Eager attention over ``x`` (1, positions, heads * features): (1, heads, positions, features)."""
    length, heads_count = x.shape[1], x.shape[2] // FEATURES

    def heads(w):
        return (x @ w.T).view(1, length, heads_count, FEATURES).transpose(1, 2)

    q, k, v = heads(wq), heads(wk), heads(wv)
    probabilities = torch.softmax((q @ k.transpose(-1, -2)).float(), dim=-1).to(x.dtype)
    return probabilities @ v


def attention_block(x, wq, wk, wv, wo):
    out = attention_output(x, wq, wk, wv)
    return out.transpose(1, 2).reshape(x.shape) @ wo.T


def attention_block_and_its_heads(x, wq, wk, wv, wo):
    out = attention_output(x, wq, wk, wv)
    return out.transpose(1, 2).reshape(x.shape) @ wo.T, out.float().sum(-1)


def inputs(length, seed, dtype=torch.bfloat16, heads=2):
    torch.manual_seed(seed)
    width = heads * FEATURES
    x = torch.randn(1, length, width, dtype=dtype)
    return (x, *(torch.randn(width, width, dtype=dtype) / width ** 0.5 for _ in range(4)))


def buffers(compiled) -> dict[str, str]:
    lines = [line.strip() for line in compiled.ir("loop").splitlines() if line.strip().startswith("buffer ")]
    return dict(line.removeprefix("buffer ").split(": ", 1) for line in lines)


def projection(compiled, args):
    """The tile of the output projection, the kernel that writes the program's output."""
    (tile,) = [t for t in compiled.compilation.tiles if t.kernel.outputs[0].type.shape == tuple(args[0].shape)]
    return tile


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_output_projection_reads_the_heads_position_by_position_on_the_tma(dtype):
    args = inputs(70, 6, dtype)
    compiled = lamina.compile(attention_block, args, target="sm_90", knobs=SMALL)
    short = "bf16" if dtype == torch.bfloat16 else "f16"
    assert f"{short}[70, 2, {FEATURES}]" in buffers(compiled).values(), buffers(compiled)
    assert projection(compiled, args).settings.products == TMA
    reference = float64_reference(attention_block, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention_block(*args), reference) + 1e-3


@pytest.mark.parametrize("fn, reordered", [(attention_block, True), (attention_block_and_its_heads, False)],
                         ids=["read_by_the_projection", "read_by_another_kernel_too"])
def test_the_cost_model_reorders_t5s_attention_output(fn, reordered):
    """At T5-base's size (512 positions, 12 heads) the projection on the TMA GEMM costs a fifth of
    what it costs on the CUDA cores; where another kernel reads the heads as they lie too, they
    keep their layout."""
    args = inputs(512, 7, heads=12)
    compiled = lamina.compile(fn, args, target="sm_90")
    assert (f"bf16[512, 12, {FEATURES}]" in buffers(compiled).values()) == reordered, buffers(compiled)
    assert (f"bf16[12, 512, {FEATURES}]" in buffers(compiled).values()) != reordered
    assert (getattr(projection(compiled, args).settings, "products", None) == TMA) == reordered


def test_off_hopper_the_layout_is_the_programs():
    compiled = lamina.compile(attention_block, inputs(512, 8, heads=12), target="sm_80")
    assert f"bf16[12, 512, {FEATURES}]" in buffers(compiled).values(), buffers(compiled)


@pytest.mark.gpu
def test_the_reordered_attention_block_matches_eager_on_the_gpu():
    args = tuple(a.cuda() for a in inputs(500, 9))
    compiled = lamina.compile(attention_block, args)
    reference = float64_reference(attention_block, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(attention_block(*args), reference) + 1e-3


def test_reordering_moves_every_access_and_the_unread_elements_with_the_axes():
    """``with_axes_in_order`` on a (3, 4) temporary stored as (4, 3): the writer's store, the
    reader's load and the condition naming the elements no kernel reads all follow the axes."""
    from lamina.core.ir import dtypes, expr as ex, loop_ir
    from lamina.core.ir.torch_ir import TensorType
    from lamina.plugins.schedules.contraction.wgmma_tma.reordered_axes import with_axes_in_order

    i, j = ex.Var("i"), ex.Var("j")
    x = loop_ir.Buffer("x", TensorType((3, 4), dtypes.float32))
    t = loop_ir.Buffer("t", TensorType((3, 4), dtypes.float32), unread=ex.op("lt", loop_ir.axis_var(0), ex.const(1)))
    y = loop_ir.Buffer("y", TensorType((4, 3), dtypes.float32))

    def nest(store: loop_ir.Store) -> tuple:
        return (loop_ir.Loop("i", 3, "parallel", (loop_ir.Loop("j", 4, "parallel", (store,)),)),)

    write = loop_ir.Kernel("write", (x,), (t,), nest(loop_ir.Store("t", (i, j), loop_ir.Load("x", (i, j), dtypes.float32))))
    read = loop_ir.Kernel("read", (t,), (y,), nest(loop_ir.Store("y", (j, i), loop_ir.Load("t", (i, j), dtypes.float32))))
    program = with_axes_in_order(loop_ir.Program((x,), (y,), (t,), (write, read)), t, (1, 0))
    (moved,) = program.temporaries
    assert moved.type.shape == (4, 3) and moved.unread == ex.op("lt", loop_ir.axis_var(1), ex.const(1))
    stores = [s for k in program.kernels for s in loop_ir.statements(k.body) if isinstance(s, loop_ir.Store)]
    assert stores[0].index == (j, i)
    assert loop_ir.loads(program.kernels[1].body) and next(loop_ir.loads(program.kernels[1].body)).index == (j, i)
    assert all(b.type.shape == (4, 3) for k in program.kernels for b in k.inputs + k.outputs if b.name == "t")

"""The attention graphs that AOTAutograd writes on CUDA, compiled without a GPU.

On CUDA, ``scaled_dot_product_attention`` reaches a backend as the fused kernel PyTorch
would run: ``_scaled_dot_product_efficient_attention`` in float32, the cuDNN kernel in
bfloat16 (what torch 2.11 picked on an H200 for every model of the matrix), the flash
kernel elsewhere; each with several results, of which the graph reads the first and
keeps a ``getitem`` for every other. The graphs here are traced as AOTAutograd traces
them, with fake CUDA tensors, the way Hugging Face's attention calls these ops (keys and
values repeated per query head, the efficient kernel's mask padded to a multiple of 16
and sliced back), then compiled by lamina's torch.compile backend and run on the
simulator with CPU tensors.
"""

from __future__ import annotations

import math
import operator

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from lamina.api import Compiler
from lamina.bench.measure import relative_error
from lamina.integrations.torch_compile import GraphRunner

aten = torch.ops.aten
SCALE = 0.25


def repeated(kv: torch.Tensor, group: int) -> torch.Tensor:
    """Hugging Face's ``repeat_kv``: each key/value head repeated for the query heads that share it."""
    b, heads, length, dim = kv.shape
    expanded = aten.expand(aten.unsqueeze(kv, 2), [b, heads, group, length, dim])
    return aten.view(aten.clone(expanded), [b, heads * group, length, dim])


def efficient(q, k, v, mask):
    padded = aten.slice(aten.constant_pad_nd(mask, [0, -mask.shape[-1] % 16]), -1, 0, mask.shape[-1])
    return aten._scaled_dot_product_efficient_attention(q, repeated(k, 2), repeated(v, 2), padded, False,
                                                        scale=SCALE)[0]


def cudnn(q, k, v, mask):
    return aten._scaled_dot_product_cudnn_attention(q, repeated(k, 2), repeated(v, 2), mask, False, 0.0, False,
                                                    False, scale=SCALE)[0]


def flash(q, k, v, mask):
    return aten._scaled_dot_product_flash_attention(q, repeated(k, 2), repeated(v, 2), 0.0, True, scale=SCALE)[0]


def with_log_sum_exp(q, k, v, mask):
    """A graph that reads the log-sum-exp too, as a backward pass would."""
    results = aten._scaled_dot_product_efficient_attention(q, repeated(k, 2), repeated(v, 2), mask, True,
                                                           scale=SCALE)
    return results[0], results[1]


def reference(q, k, v, mask, causal=False):
    q, k, v = (t.double() for t in (q, k, v))
    k, v = repeated(k, 2), repeated(v, 2)
    scores = q @ k.transpose(-2, -1) * SCALE + (0 if causal else mask.double())
    if causal:
        scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)


def traced_on_cuda(fn, inputs):
    """``fn`` as AOTAutograd records it for CUDA tensors like ``inputs``."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        fakes = [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in inputs]
        return make_fx(fn)(*fakes)


def attention_inputs(dtype):
    q = torch.randn(2, 4, 13, 16, dtype=dtype)
    k, v = torch.randn(2, 2, 13, 16, dtype=dtype), torch.randn(2, 2, 13, 16, dtype=dtype)
    visible = torch.rand(2, 1, 13, 13) > 0.3
    visible[..., 0] = True
    mask = torch.zeros(2, 1, 13, 13, dtype=dtype).masked_fill(~visible, -math.inf)
    return q, k, v, mask


@pytest.mark.parametrize("fn,dtype", [(efficient, torch.float32), (cudnn, torch.bfloat16), (flash, torch.bfloat16),
                                      (cudnn, torch.float32)], ids=["efficient-f32", "cudnn-bf16", "flash-bf16",
                                                                    "cudnn-f32"])
def test_the_fused_attention_ops_compile_as_attention(fn, dtype):
    inputs = attention_inputs(dtype)
    graph = traced_on_cuda(fn, inputs)
    op = {str(n.target) for n in graph.graph.nodes if "attention" in str(n.target)}.pop()
    assert sum(1 for n in graph.graph.nodes if n.target is operator.getitem) > 1, \
        f"the traced graph keeps a getitem for every result of {op}"
    (out,) = GraphRunner(Compiler(), graph, inputs)(*inputs)
    expected = reference(*inputs, causal=fn is flash)[0]
    assert out.dtype == dtype and out.shape == expected.shape
    assert relative_error(out, expected) < (1e-5 if dtype == torch.float32 else 1e-2), op


def test_a_graph_that_reads_the_log_sum_exp_gets_it_padded_as_pytorch_pads_it():
    inputs = attention_inputs(torch.float32)
    out, lse = GraphRunner(Compiler(), traced_on_cuda(with_log_sum_exp, inputs), inputs)(*inputs)
    expected_out, expected_lse = reference(*inputs)
    assert lse.shape == (2, 4, 32) and torch.isinf(lse[..., 13:]).all()
    assert relative_error(out, expected_out) < 1e-5
    assert relative_error(lse[..., :13], expected_lse) < 1e-5



def test_a_prompt_s_attention_written_query_by_query_is_not_a_decoding_step_s():
    """GPT-2's attention as cuDNN's op gives it, its output read query by query by the next
    product: the fused kernel's rows run over the heads of one query first, so no two consecutive
    rows read the same keys; still each head's 40 queries read its keys, which makes it a prompt's
    attention, which the decode schedule must not take (it walks every key once per query)."""
    heads, length = 4, 40
    qkv = torch.randn(1, length, 3 * heads * 64, dtype=torch.bfloat16)
    w = torch.randn(heads * 64, heads * 64, dtype=torch.bfloat16)

    def prompt(qkv, w):
        q, k, v = (aten.permute(aten.view(t, [1, length, heads, 64]), [0, 2, 1, 3])
                   for t in aten.split(qkv, heads * 64, 2))
        out = aten._scaled_dot_product_cudnn_attention(q, k, v, None, False, 0.0, True, False, scale=SCALE)[0]
        by_query = aten.clone(aten.transpose(out, 1, 2), memory_format=torch.contiguous_format)
        return aten.mm(aten.view(by_query, [length, heads * 64]), w)

    runner = GraphRunner(Compiler(target="sm_90"), traced_on_cuda(prompt, (qkv, w)), (qkv, w))
    ((_, specialization),) = runner._specializations.values()
    schedules = [t.schedule for t in specialization.compilation.tiles]
    assert "attention_decode" not in schedules, schedules


def test_gemma_s_heads_as_cudnn_s_op_gets_them_run_as_one_attention_kernel():
    """Gemma's attention as cuDNN's op gives it: 256 features, one key-value head repeated for
    every query head, an additive causal mask, the output read position by position. The
    attention kernel takes it, its blocks along the positions (the heads read the same keys)."""
    heads, length, depth = 4, 70, 256

    def gemma(q, k, v, mask):
        out = aten._scaled_dot_product_cudnn_attention(q, repeated(k, heads), repeated(v, heads), mask, False, 0.0,
                                                       False, False, scale=SCALE)[0]
        return aten.clone(aten.transpose(out, 1, 2), memory_format=torch.contiguous_format)

    q = torch.randn(1, heads, length, depth, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 1, length, depth, dtype=torch.bfloat16) for _ in range(2))
    positions = torch.arange(length)
    mask = torch.zeros(1, 1, length, length, dtype=torch.bfloat16).masked_fill(
        positions[None, :] > positions[:, None], -math.inf)
    runner = GraphRunner(Compiler(target="sm_90"), traced_on_cuda(gemma, (q, k, v, mask)), (q, k, v, mask))
    (out,) = runner(q, k, v, mask)
    ((_, specialization),) = runner._specializations.values()
    assert [t.schedule for t in specialization.compilation.tiles] == ["attention"]
    scores = q.double() @ k.double().transpose(-2, -1) * SCALE + mask.double()
    expected = (torch.softmax(scores, -1) @ v.double()).transpose(1, 2)
    assert relative_error(out, expected) < 1e-2

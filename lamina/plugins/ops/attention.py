"""``scaled_dot_product_attention`` kept whole, and the fused attention ops PyTorch picks for it.

``softmax(q @ k^T * scale + mask) @ v``, with the scores, the softmax and the second
product in float32 (half inputs included) and the maximum subtracted. With 16-bit inputs the
probabilities are rounded to the inputs' dtype before the second product, as eager's kernels
(flash, cuDNN, and the math path) do: that product then has two 16-bit operands, which is what
the tensor cores multiply. Grouped key and
value heads (fewer of them than query heads) are read by index: query head ``h``
reads key head ``h // group``, an IndexMap that folds into the product's operand
read, so the keys are never repeated in memory. ``is_causal`` lets position ``l``
see keys ``s <= l``; ``attn_mask`` is a boolean mask (true: attend) or added to the
scores. A query that a mask hides every key from gets zeros, as from PyTorch's kernels and
its math path (``_safe_softmax``), not the NaN of a plain softmax.

On CUDA, Dynamo and AOTAutograd turn ``scaled_dot_product_attention`` into the kernel
PyTorch would run (flash, memory-efficient, cuDNN; on the CPU, its flash kernel), an
op with several results. Each decomposes as the op it stands for; of its other
results, the log-sum-exp of each query's scores (what a backward pass reads) is
computed where something reads it, and the rest (the random-number state of dropout,
sequence offsets), which only training reads, are left out.

A (batch, heads, length, features) output is stored position by position, (batch, length,
heads, features), and returned as a view in the order the op promises, as PyTorch's flash
kernel does: a model then transposes it back and projects it (``o_proj``), and that product
reads its operand row by row, in the layout the TMA copies.
"""

from __future__ import annotations

import math

import attrs

from lamina.core.ir import dtypes, expr as ex, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.activations import softmax_of
from lamina.plugins.ops.arguments import argument, tensor


def _grouped_heads(b: TensorBuilder, x: str, heads: int) -> str:
    """``x`` with ``heads`` heads along axis -3, head ``h`` reading head ``h // group`` of ``x``."""
    shape = b.shape(x)
    if shape[-3] == heads:
        return x
    if heads % shape[-3]:
        raise b.fail(f"{heads} query heads cannot share {shape[-3]} key/value heads: the count must divide")
    group = heads // shape[-3]
    out = shape[:-3] + (heads,) + shape[-2:]
    d = tensor_ir.output_vars(len(out))
    index = list(d)
    index[-3] = d[-3] // group
    return b.index_map(x, index, out, role="heads")


@attrs.frozen
class AttentionArguments:
    """Where an attention op's schema puts each argument: a position, or None for keyword-only."""

    mask: tuple[int | None, str] | None
    dropout: int
    causal: int


SDPA = AttentionArguments(mask=(3, "attn_mask"), dropout=4, causal=5)
FLASH = AttentionArguments(mask=None, dropout=3, causal=4)
FLASH_FOR_CPU = AttentionArguments(mask=(None, "attn_mask"), dropout=3, causal=4)
WITH_BIAS = AttentionArguments(mask=(3, "attn_bias"), dropout=5, causal=6)
"""The efficient and cuDNN kernels: ``(q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, ...)``."""
OVERRIDEABLE = AttentionArguments(mask=(3, "attn_bias"), dropout=4, causal=5)


def _mask_of(node: Node, schema: AttentionArguments):
    """The op's mask or bias argument, or None."""
    if schema.mask is None:
        return None
    position, name = schema.mask
    return node.kwarg(name) if position is None else argument(node, position, name)


def _masked(b: TensorBuilder, scores: str, node: Node, schema: AttentionArguments) -> str:
    rank = len(b.shape(scores))
    acc = b.dtype(scores)
    if argument(node, schema.causal, "is_causal", False):
        visible = ex.op("le", Coord(rank - 1), Coord(rank - 2))
        fn = ex.op("where", visible, Arg(0, acc), ex.Const(-math.inf, acc))
        scores = b.elementwise(fn, [scores], role="causal")
    mask = _mask_of(node, schema)
    if mask is None:
        return scores
    mask = b.value(mask)
    if b.dtype(mask) == dtypes.bool_:
        return b.where(mask, scores, -math.inf, role="masked")
    return b.binary("add", scores, b.cast(mask, acc, role="mask"), role="masked")


def attention(b: TensorBuilder, node: Node, schema: AttentionArguments) -> tuple[str, str]:
    """The attention output and the float32 log-sum-exp of each query's scores, (..., L)."""
    q, k, v = tensor(b, node, 0, "query"), tensor(b, node, 1, "key"), tensor(b, node, 2, "value")
    if argument(node, schema.dropout, "dropout_p", 0.0):
        raise b.fail("dropout in attention is not supported; compile the model in eval mode with dropout_p=0")
    for name in (q, k, v):
        if len(b.shape(name)) < 2:
            raise b.fail(f"attention needs (..., length, features) tensors, {name} is {list(b.shape(name))}")
    out_dtype = b.dtype(q)
    acc = compute_dtype(out_dtype)
    heads = b.shape(q)[-3] if len(b.shape(q)) >= 3 else None
    q, k, v = (b.cast(x, acc, role=r) for x, r in ((q, "query"), (k, "key"), (v, "value")))
    if heads is not None and len(b.shape(k)) >= 3:
        k, v = _grouped_heads(b, k, heads), _grouped_heads(b, v, heads)
    scale = node.kwarg("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(b.shape(q)[-1])
    scores = b.binary("mul", b.matmul(q, b.transpose(k, -2, -1)), float(scale), role="scores")
    softmax = softmax_of(b, _masked(b, scores, node, schema), -1)
    probabilities = softmax.probabilities()
    if _mask_of(node, schema) is not None:
        hidden = b.binary("eq", softmax.maximum, -math.inf, role="hidden")
        probabilities = b.where(hidden, 0.0, probabilities, role="probabilities")
    if out_dtype.itemsize < acc.itemsize:
        probabilities = b.cast(b.cast(probabilities, out_dtype, role="probabilities"), acc)
    out = b.matmul(probabilities, v)
    if len(b.shape(out)) != 4:
        return b.cast(out, out_dtype), softmax.log_sum_exp()
    by_position = b.cast(b.transpose(out, 1, 2), out_dtype)
    return b.transpose(by_position, 1, 2), softmax.log_sum_exp()


def decompose_sdpa(b: TensorBuilder, node: Node) -> str:
    return attention(b, node, SDPA)[0]


def decompose_flash(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    """``(output, logsumexp (B, H, L), ...)``."""
    return attention(b, node, FLASH)


def decompose_flash_for_cpu(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    return attention(b, node, FLASH_FOR_CPU)


def decompose_efficient(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    """``(output, log_sumexp, ...)``: the log-sum-exp of (B, H, L) padded to a multiple of 32 queries
    (with +inf, where PyTorch leaves what memory held), or (B, H, 0) without ``compute_log_sumexp``."""
    output, log_sum_exp = attention(b, node, WITH_BIAS)
    queries = b.shape(log_sum_exp)[-1]
    padded = -(-queries // 32) * 32 if argument(node, 4, "compute_log_sumexp") else 0
    if padded == 0:
        return output, b.full(0.0, b.shape(log_sum_exp)[:-1] + (0,), dtypes.float32)
    if padded > queries:
        filler = b.full(math.inf, b.shape(log_sum_exp)[:-1] + (padded - queries,), dtypes.float32, role="padding")
        log_sum_exp = b.concat([log_sum_exp, filler], -1)
    return output, log_sum_exp


def decompose_cudnn(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    """``(output, logsumexp (B, H, L, 1), ...)``."""
    output, log_sum_exp = attention(b, node, WITH_BIAS)
    return output, b.unsqueeze(log_sum_exp, -1)


def decompose_overrideable(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    return attention(b, node, OVERRIDEABLE)


DECOMPOSITIONS = {
    "aten.scaled_dot_product_attention.default": decompose_sdpa,
    "aten._scaled_dot_product_flash_attention.default": decompose_flash,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": decompose_flash_for_cpu,
    "aten._scaled_dot_product_efficient_attention.default": decompose_efficient,
    "aten._scaled_dot_product_cudnn_attention.default": decompose_cudnn,
    "aten._scaled_dot_product_fused_attention_overrideable.default": decompose_overrideable,
}

"""``scaled_dot_product_attention`` kept whole, as lamina decomposes it.

``softmax(q @ k^T * scale + mask) @ v``, with the scores, the softmax and the second
product in float32 (half inputs included) and the maximum subtracted. Grouped key and
value heads (fewer of them than query heads) are read by index: query head ``h``
reads key head ``h // group``, an IndexMap that folds into the product's operand
read, so the keys are never repeated in memory. ``is_causal`` lets position ``l``
see keys ``s <= l``; ``attn_mask`` is a boolean mask (true: attend) or added to the
scores.
"""

from __future__ import annotations

import math

from lamina.core.ir import dtypes, expr as ex, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.activations import stable_softmax
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


def _masked(b: TensorBuilder, scores: str, node: Node) -> str:
    rank = len(b.shape(scores))
    acc = b.dtype(scores)
    if argument(node, 5, "is_causal", False):
        visible = ex.op("le", Coord(rank - 1), Coord(rank - 2))
        fn = ex.op("where", visible, Arg(0, acc), ex.Const(-math.inf, acc))
        scores = b.elementwise(fn, [scores], role="causal")
    mask = argument(node, 3, "attn_mask")
    if mask is None:
        return scores
    mask = b.value(mask)
    if b.dtype(mask) == dtypes.bool_:
        return b.where(mask, scores, -math.inf, role="masked")
    return b.binary("add", scores, b.cast(mask, acc, role="mask"), role="masked")


def decompose_sdpa(b: TensorBuilder, node: Node) -> str:
    q, k, v = tensor(b, node, 0, "query"), tensor(b, node, 1, "key"), tensor(b, node, 2, "value")
    if argument(node, 4, "dropout_p", 0.0):
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
    probs = stable_softmax(b, _masked(b, scores, node), -1, None, log=False)
    return b.cast(b.matmul(probs, v), out_dtype)


DECOMPOSITIONS = {
    "aten.scaled_dot_product_attention.default": decompose_sdpa,
}

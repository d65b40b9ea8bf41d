"""Lookups by a tensor of indices: one IndexMap whose index reads integers from that tensor.

``embedding`` reads row ``ids[...]`` of its table; ``index.Tensor`` reads the indexed
axes at the broadcast index tensors, where negative indices count from the end as in
PyTorch (a ``where`` in the index: C's ``%`` would keep the sign). An axis of length 1 is read
at 0 without reading its index tensor, the one index PyTorch accepts there (0 or -1): a padding
mask of one sequence, ``attention_mask[batch, key]`` at batch 1, is then a plain read that
inlines into every reader instead of a lookup stored once. No index tensor is ever broadcast in
memory: each is read where the output coordinates say.
"""

from __future__ import annotations

from lamina.core.ir import expr as ex, tensor_ir
from lamina.core.ir.shapes import broadcast_shape
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.tensor_ir import Gathered
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_embedding(b: TensorBuilder, node: Node) -> str:
    """``embedding(weight, indices)``: ``weight[indices[...], :]``."""
    weight, ids = tensor(b, node, 0, "weight"), tensor(b, node, 1, "indices")
    if len(b.shape(weight)) != 2:
        raise b.fail(f"embedding needs a 2-D table, {weight} has shape {list(b.shape(weight))}")
    rank = len(b.shape(ids))
    d = tensor_ir.output_vars(rank + 1)
    shape = b.shape(ids) + b.shape(weight)[1:]
    return b.index_map(weight, [Gathered(0, d[:rank]), d[rank]], shape, gathers=[ids], role="rows")


def _reads(b: TensorBuilder, name: str, batch: tuple[int, ...], coords) -> tuple:
    """How an index tensor broadcast to ``batch`` is read at the batch coordinates ``coords``."""
    shape = b.shape(name)
    lead = len(batch) - len(shape)
    return tuple(ex.const(0) if size == 1 else coords[lead + k] for k, size in enumerate(shape))


def decompose_index(b: TensorBuilder, node: Node) -> str:
    """``x[i0, i1, ...]`` with index tensors (``None`` keeps an axis whole), as ``aten.index.Tensor``."""
    x = tensor(b, node)
    src = b.shape(x)
    given = list(argument(node, 1, "indices"))
    given += [None] * (len(src) - len(given))
    indexed = [k for k, i in enumerate(given) if i is not None]
    if not indexed:
        return x
    names = [b.value(given[k]) for k in indexed]
    single = {k for k in indexed if src[k] == 1}
    batch = broadcast_shape(*(b.shape(n) for n in names))
    if batch is None:
        raise b.fail("the index tensors do not broadcast: " + ", ".join(f"{list(b.shape(n))}" for n in names))
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    first = indexed[0] if adjacent else 0
    kept = [k for k in range(len(src)) if k not in indexed]
    before = [k for k in kept if k < first] if adjacent else []
    after = [k for k in kept if k not in before]
    shape = tuple(src[k] for k in before) + batch + tuple(src[k] for k in after)
    d = tensor_ir.output_vars(len(shape))
    batch_coords = d[len(before):len(before) + len(batch)]
    index = {k: d[p] for p, k in enumerate(before)}
    index.update({k: d[len(before) + len(batch) + p] for p, k in enumerate(after)})
    read = [(k, name) for k, name in zip(indexed, names) if k not in single]
    index.update({k: ex.const(0) for k in single})
    for position, (k, name) in enumerate(read):
        found = Gathered(position, _reads(b, name, batch, batch_coords))
        index[k] = ex.op("where", ex.op("lt", found, 0), found + src[k], found)
    return b.index_map(x, [index[k] for k in range(len(src))], shape, gathers=[n for _, n in read], role="gather")


def decompose_index_select(b: TensorBuilder, node: Node) -> str:
    """``index_select(x, dim, index)``: a 1-D index tensor along one axis."""
    x, ids = tensor(b, node), tensor(b, node, 2, "index")
    src = b.shape(x)
    dim = b.axis(argument(node, 1, "dim"), len(src))
    shape = src[:dim] + (b.shape(ids)[0] if b.shape(ids) else 1,) + src[dim + 1:]
    d = tensor_ir.output_vars(len(shape))
    index = list(d)
    index[dim] = Gathered(0, (d[dim],) if b.shape(ids) else ())
    return b.index_map(x, index, shape, gathers=[ids], role="gather")


def decompose_gather(b: TensorBuilder, node: Node) -> str:
    """``gather(x, dim, index)``: ``out[..., j, ...] = x[..., index[..., j, ...], ...]`` along ``dim``, of
    ``index``'s shape; on the other axes ``index`` may be smaller than ``x``, never larger."""
    x, ids = tensor(b, node), tensor(b, node, 2, "index")
    src, shape = b.shape(x), b.shape(ids)
    dim = b.axis(argument(node, 1, "dim"), len(src))
    if len(shape) != len(src) or any(k != dim and s > src[k] for k, s in enumerate(shape)):
        raise b.fail(f"gather's index of shape {list(shape)} does not fit {x} of shape {list(src)} along {dim}")
    d = tensor_ir.output_vars(len(shape))
    index = list(d)
    index[dim] = Gathered(0, tuple(d))
    return b.index_map(x, index, shape, gathers=[ids], role="gather")


DECOMPOSITIONS = {
    "aten.embedding.default": decompose_embedding,
    "aten.gather.default": decompose_gather,
    "aten.index.Tensor": decompose_index,
    "aten.index_select.default": decompose_index_select,
}

"""Ops that compute nothing new: copies, aliases, casts, fills, checks, and picking one result of several.

lamina's values are immutable, so a copy or an alias is the value itself.
"""

from __future__ import annotations

from lamina.core.ir import dtypes
from lamina.core.ir.tensor_builder import TensorBuilder, number_dtype
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_identity(b: TensorBuilder, node: Node) -> str:
    return tensor(b, node)


def decompose_check(b: TensorBuilder, node: Node) -> tuple[str, ...]:
    """A metadata assertion: export already checked it, and it has no result."""
    return ()


def decompose_to_copy(b: TensorBuilder, node: Node) -> str:
    """``Tensor.to``: a cast when a dtype is given; device and layout are lamina's business."""
    dtype = node.kwarg("dtype")
    x = tensor(b, node)
    return b.cast(x, dtype) if dtype is not None else x


def decompose_convert_element_type(b: TensorBuilder, node: Node) -> str:
    """``prims.convert_element_type(x, dtype)``, which AOTAutograd writes for a number of symbolic
    sizes turned into a tensor (``x / math.sqrt(x.shape[0])`` under ``dynamic=True``): a cast."""
    return b.cast(tensor(b, node), argument(node, 1, "dtype"))


def decompose_copy(b: TensorBuilder, node: Node) -> str:
    """``copy(x, source)``, the value of ``x.copy_(source)`` (a state cache's slot overwritten): the
    source broadcast to ``x``'s shape in ``x``'s dtype; ``x``'s values are not read."""
    x, source = tensor(b, node), tensor(b, node, 1, "src")
    return b.broadcast_to(b.cast(source, b.dtype(x)), b.shape(x), role="copy")


def decompose_full(b: TensorBuilder, node: Node) -> str:
    value = argument(node, 1, "fill_value")
    return b.full(value, argument(node, 0, "size"), node.kwarg("dtype") or number_dtype(value))


def decompose_full_like(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    return b.full(argument(node, 1, "fill_value"), b.shape(x), node.kwarg("dtype") or b.dtype(x))


def decompose_scalar_tensor(b: TensorBuilder, node: Node) -> str:
    return b.full(argument(node, 0, "s"), (), node.kwarg("dtype") or dtypes.float32)


def _fill(value):
    """``zeros``, ``ones``, ``new_*`` and their ``*_like`` forms: the shape and dtype PyTorch computes, filled."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        return b.full(value, node.type.shape, node.type.dtype)

    return decompose


def decompose_new_full(b: TensorBuilder, node: Node) -> str:
    return b.full(argument(node, 2, "fill_value"), node.type.shape, node.type.dtype)


def decompose_getitem(b: TensorBuilder, node: Node) -> str:
    """One result of an op with several (``var_mean``, ``aminmax``).

    A decomposition may leave out results that a compiled program never reads (the
    random-number state of attention's dropout): reading one is an error that says so."""
    source, position = node.args[:2]
    results = b.results(source)
    if not 0 <= position < len(results):
        raise b.fail(f"lamina computes {len(results)} result(s) of {source.name}, not result {position}; "
                     "read only the results listed in the op's decomposition, or keep the op out of the program")
    return results[position]


DECOMPOSITIONS = {
    "aten.clone.default": decompose_identity,
    "aten.alias.default": decompose_identity,
    "aten.detach.default": decompose_identity,
    "aten.lift_fresh_copy.default": decompose_identity,
    "aten._assert_tensor_metadata.default": decompose_check,
    "aten._to_copy.default": decompose_to_copy,
    "aten.copy.default": decompose_copy,
    "prims.convert_element_type.default": decompose_convert_element_type,
    "aten.full.default": decompose_full,
    "aten.full_like.default": decompose_full_like,
    "aten.scalar_tensor.default": decompose_scalar_tensor,
    "aten.zeros.default": _fill(0),
    "aten.ones.default": _fill(1),
    "aten.zeros_like.default": _fill(0),
    "aten.ones_like.default": _fill(1),
    "aten.new_zeros.default": _fill(0),
    "aten.new_ones.default": _fill(1),
    "aten.new_full.default": decompose_new_full,
    "getitem": decompose_getitem,
}

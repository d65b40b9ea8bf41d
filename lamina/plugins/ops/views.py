"""Views: each is one IndexMap that reads the input at an affine function of the output coordinates."""

from __future__ import annotations

from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, tensor


def decompose_view(b: TensorBuilder, node: Node) -> str:
    return b.reshape(tensor(b, node), argument(node, 1, "size"))


def decompose_permute(b: TensorBuilder, node: Node) -> str:
    return b.permute(tensor(b, node), argument(node, 1, "dims"))


def decompose_transpose(b: TensorBuilder, node: Node) -> str:
    return b.transpose(tensor(b, node), argument(node, 1, "dim0"), argument(node, 2, "dim1"))


def decompose_t(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    return b.transpose(x, 0, 1) if len(b.shape(x)) == 2 else x


def decompose_expand(b: TensorBuilder, node: Node) -> str:
    return b.expand(tensor(b, node), argument(node, 1, "size"))


def decompose_unsqueeze(b: TensorBuilder, node: Node) -> str:
    return b.unsqueeze(tensor(b, node), argument(node, 1, "dim"))


def decompose_squeeze(b: TensorBuilder, node: Node) -> str:
    return b.squeeze(tensor(b, node), argument(node, 1, "dim"))


def decompose_slice(b: TensorBuilder, node: Node) -> str:
    return b.slice(
        tensor(b, node), argument(node, 1, "dim", 0), argument(node, 2, "start"),
        argument(node, 3, "end"), argument(node, 4, "step", 1),
    )


def decompose_repeat(b: TensorBuilder, node: Node) -> str:
    return b.repeat(tensor(b, node), argument(node, 1, "repeats"))


def decompose_select(b: TensorBuilder, node: Node) -> str:
    return b.select(tensor(b, node), argument(node, 1, "dim"), argument(node, 2, "index"))


DECOMPOSITIONS = {
    "aten.view.default": decompose_view,
    "aten._unsafe_view.default": decompose_view,
    "aten.permute.default": decompose_permute,
    "aten.transpose.int": decompose_transpose,
    "aten.t.default": decompose_t,
    "aten.expand.default": decompose_expand,
    "aten.unsqueeze.default": decompose_unsqueeze,
    "aten.squeeze.default": decompose_squeeze,
    "aten.squeeze.dim": decompose_squeeze,
    "aten.squeeze.dims": decompose_squeeze,
    "aten.slice.Tensor": decompose_slice,
    "aten.select.int": decompose_select,
    "aten.repeat.default": decompose_repeat,
}

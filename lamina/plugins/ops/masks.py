"""Boolean masks and what selects with them: triangles, logic, ``any``, ``masked_fill``.

A triangle is an Elementwise that compares its output coordinates. Bitwise ops on
booleans are the logical ones; on integers lamina has no bitwise scalar op, and says so.
"""

from __future__ import annotations

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.tensor_ir import Arg, Coord
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, operand, tensor


def _triangle(upper: bool):
    """``triu``/``tril``: keep the elements on the right side of ``diagonal`` of the last two
    axes, zero the rest; of a boolean tensor of true (a causal mask), the comparison itself."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        x = tensor(b, node)
        rank = len(b.shape(x))
        if rank < 2:
            raise b.fail(f"{'triu' if upper else 'tril'} needs a tensor of rank 2 or more, {x} has rank {rank}")
        diagonal = argument(node, 1, "diagonal", 0)
        offset = Coord(rank - 1) - Coord(rank - 2)
        keep = ex.op("ge", offset, diagonal) if upper else ex.op("le", offset, diagonal)
        dtype = b.dtype(x)
        if dtype == dtypes.bool_ and b.filled_with(x) is True:
            return b.elementwise(keep, [], b.shape(x))
        return b.elementwise(ex.op("where", keep, Arg(0, dtype), ex.cast(ex.const(0), dtype)), [x])

    return decompose


def _logical(opname: str):
    """``and``/``or``; a side filled with the identity (``triu`` of ``ones`` leaves ``mask and
    true``) is dropped, so that the mask reads as the comparison it is."""
    identity = opname == "and"

    def decompose(b: TensorBuilder, node: Node) -> str:
        a, c = (operand(b, x) for x in node.args[:2])
        for kept, other in ((a, c), (c, a)):
            if (isinstance(kept, str) and isinstance(other, str) and b.filled_with(other) is identity
                    and b.shape(kept) == b.shape(other) and b.dtype(kept) == dtypes.bool_):
                return kept
        return b.apply(opname, a, c)

    return decompose


def _bitwise(opname: str):
    """``&``, ``|`` of booleans; integers have no bitwise op in lamina's scalar language."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        operands = [operand(b, a) for a in node.args[:2]]
        for o in operands:
            if (isinstance(o, str) and b.dtype(o) != dtypes.bool_) or (not isinstance(o, (str, bool))):
                raise b.fail(f"bitwise {opname} is supported on booleans only; cast the operands to bool")
        return b.apply(opname, *operands)

    return decompose


def decompose_logical_not(b: TensorBuilder, node: Node) -> str:
    return b.unary("not", tensor(b, node))


def decompose_bitwise_not(b: TensorBuilder, node: Node) -> str:
    x = tensor(b, node)
    if b.dtype(x) != dtypes.bool_:
        raise b.fail(f"bitwise not is supported on booleans only, {x} is {b.dtype(x).name}")
    return b.unary("not", x)


def _any_or_all(op: str):
    """``any``/``all`` over ``dim`` (every axis when absent): the max or min of the values as 0 and 1."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        x = tensor(b, node)
        flags = b.cast(b.cast(x, dtypes.bool_, role="truth"), dtypes.int32, role="flag")
        found = b.reduce(flags, op, argument(node, 1, "dim"), argument(node, 2, "keepdim", False))
        return b.cast(found, dtypes.bool_)

    return decompose


def decompose_masked_fill(b: TensorBuilder, node: Node) -> str:
    """``x`` where ``mask`` is false, ``value`` where it is true, in ``x``'s dtype."""
    x, mask, value = tensor(b, node), tensor(b, node, 1, "mask"), operand(b, argument(node, 2, "value"))
    if isinstance(value, str):
        value = b.cast(value, b.dtype(x), role="value")
    result = b.where(mask, value, x)
    return b.cast(result, b.dtype(x))


DECOMPOSITIONS = {
    "aten.triu.default": _triangle(upper=True),
    "aten.tril.default": _triangle(upper=False),
    "aten.logical_and.default": _logical("and"),
    "aten.logical_or.default": _logical("or"),
    "aten.logical_not.default": decompose_logical_not,
    "aten.bitwise_and.Tensor": _bitwise("and"),
    "aten.bitwise_and.Scalar": _bitwise("and"),
    "aten.bitwise_or.Tensor": _bitwise("or"),
    "aten.bitwise_or.Scalar": _bitwise("or"),
    "aten.bitwise_not.default": decompose_bitwise_not,
    "aten.any.dim": _any_or_all("max"),
    "aten.any.dims": _any_or_all("max"),
    "aten.any.default": _any_or_all("max"),
    "aten.all.dim": _any_or_all("min"),
    "aten.all.default": _any_or_all("min"),
    "aten.masked_fill.Scalar": decompose_masked_fill,
    "aten.masked_fill.Tensor": decompose_masked_fill,
}

"""Floor and truncating division, remainders, and rounding, exactly as eager PyTorch computes them.

C's integer ``/`` and ``%`` truncate towards zero: they are the scalar ops ``truncdiv``
and ``fmod``, which mean the same on the GPU and in the simulator for operands of any
sign. PyTorch's floor division and ``remainder`` round towards minus infinity instead,
so they are ``truncdiv`` and ``fmod`` corrected where the remainder is nonzero and the
signs differ (c10's ``div_floor_integer``). Float floor division is not ``floor(a / b)``,
whose quotient may round up to the next integer: it is c10's ``div_floor_floating``,
``(a - fmod(a, b)) / b`` corrected for the sign and rounded to the nearest integer.
Half precision computes in float32; ATen's half-precision quotients by a tensor round
each step to half precision, and so does lamina (``_quotient``).

Integer division by zero: eager PyTorch raises ZeroDivisionError. A divisor that is the
number 0 is refused when the program compiles. A tensor divisor is known only when the
program runs: the Tensor IR interpreter and the Kernel IR simulator then raise a
LaminaError that says so, but a CUDA kernel cannot raise, and gives whatever the GPU's
integer division gives (an unspecified value, no error). Float division by zero gives
IEEE infinities and NaNs, as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Callable

from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.expr import Expr
from lamina.core.ir.tensor_builder import Operand, TensorBuilder, compute_dtype
from lamina.core.ir.tensor_ir import Arg
from lamina.core.ir.torch_ir import Node
from lamina.plugins.ops.arguments import argument, operand, tensor

Formula = Callable[[Expr, Expr], Expr]
Step = Callable[[Expr], Expr]
"""Rounds an intermediate result of a float formula as PyTorch's kernel does."""

HALF_TYPES = (dtypes.float16, dtypes.bfloat16)


def _number(value: int | float, dtype: dtypes.DType) -> Expr:
    return ex.cast(ex.const(value), dtype)


def _elementwise(b: TensorBuilder, what: str, formula: Formula, x: Operand, y: Operand,
                 *, divisor_as_given: bool = False) -> str:
    """``formula(x, y)`` over tensors and Python numbers, broadcast, in PyTorch's result type.

    The operands are converted to that type first, as ATen converts them to its common
    dtype; with ``divisor_as_given``, the divisor is read as it is, in the type the formula
    computes in (ATen's half-precision quotients by one number)."""
    dtype = b.result_type(x, y)
    if dtype == dtypes.bool_:
        raise b.fail(f"{what} is not defined for bool tensors (PyTorch refuses them too); cast them to an integer type")
    if dtypes.is_integer(dtype) and not isinstance(y, str) and y == 0:
        raise b.fail(f"{what} of integers by the number 0: PyTorch raises ZeroDivisionError; "
                     "divide by a nonzero number")
    compute = compute_dtype(dtype)
    tensors = [o for o in (x, y) if isinstance(o, str)]
    roles = [role for o, role in zip((x, y), ("lhs", "rhs")) if isinstance(o, str)]
    inputs = b.broadcast(*tensors, roles=roles)
    args, position = [], 0
    for o, as_given in ((x, False), (y, divisor_as_given)):
        if isinstance(o, str):
            value = Arg(position, b.dtype(o))
            position += 1
            args.append(ex.cast(value if as_given else ex.cast(value, dtype), compute))
        elif as_given or dtype == compute:
            args.append(_number(o, compute))
        else:
            # Not ``ex.cast``, which would fold the constant without rounding it to ``dtype``.
            args.append(ex.cast(ex.op("cast", ex.const(o), dtype=dtype), compute))
    return b.elementwise(ex.cast(formula(*args), dtype), inputs, role=what)


def _signs_differ(r: Expr, d: Expr) -> Expr:
    """``r`` is nonzero and of the other sign than ``d``: where truncation and flooring part."""
    zero = _number(0, r.dtype)
    return ex.op("and", ex.op("ne", r, zero), ex.op("ne", ex.op("lt", r, zero), ex.op("lt", d, zero)))


def _unrounded(e: Expr) -> Expr:
    return e


def truncating_quotient(a: Expr, d: Expr, step: Step | None = None) -> Expr:
    """``a / d`` rounded towards zero: C's ``/`` for integers, ``trunc(a / d)`` for floats."""
    if step is None:
        return ex.op("truncdiv", a, d)
    return ex.op("trunc", step(ex.op("div", a, d)))


def floor_quotient(a: Expr, d: Expr, step: Step | None = None) -> Expr:
    """``a / d`` rounded towards minus infinity, as PyTorch computes it."""
    if a.dtype.is_float:
        return _floor_quotient_of_floats(a, d, step or _unrounded)
    q = ex.op("truncdiv", a, d)
    if not a.dtype.is_signed:
        return q
    return ex.op("where", _signs_differ(ex.op("fmod", a, d), d), ex.op("sub", q, _number(1, a.dtype)), q)


def _floor_quotient_of_floats(a: Expr, d: Expr, step: Step) -> Expr:
    """c10's ``div_floor_floating_vec``: the quotient of ``a - fmod(a, d)``, an exact multiple
    of ``d`` up to rounding (of ``a`` itself where ``a / d`` overflows), one less where the
    remainder's sign differs from ``d``'s, then rounded to the nearest integer; a zero
    quotient keeps the sign of ``a / d``, and a zero divisor gives ``a / d``."""
    c = a.dtype
    one, zero, infinity = ex.Const(1.0, c), ex.Const(0.0, c), ex.Const(math.inf, c)
    mod = ex.op("fmod", a, d)
    true_quotient = step(ex.op("div", a, d))
    overflows = ex.op("and", ex.op("eq", ex.op("abs", true_quotient), infinity), ex.op("ne", ex.op("abs", a), infinity))
    multiple = ex.op("where", overflows, a, step(ex.op("sub", a, mod)))
    correction = ex.op("where", _signs_differ(mod, d), one, zero)
    quotient = step(ex.op("sub", step(ex.op("div", multiple, d)), correction))
    floor = ex.op("floor", quotient)
    up = ex.op("where", ex.op("gt", step(ex.op("sub", quotient, floor)), ex.Const(0.5, c)), one, zero)
    signed_zero = ex.op("mul", true_quotient, zero)
    result = ex.op("where", ex.op("ne", quotient, zero), step(ex.op("add", floor, up)), signed_zero)
    return ex.op("where", ex.op("eq", d, zero), true_quotient, result)


def floor_remainder(a: Expr, d: Expr) -> Expr:
    """``a - floor(a / d) * d``, of the divisor's sign: ``fmod`` plus ``d`` where their signs differ."""
    r = ex.op("fmod", a, d)
    if not a.dtype.is_float and not a.dtype.is_signed:
        return r
    return ex.op("where", _signs_differ(r, d), ex.op("add", r, d), r)


def truncated_remainder(a: Expr, d: Expr) -> Expr:
    """``fmod``: the remainder of the truncating division, of the dividend's sign."""
    return ex.op("fmod", a, d)


def _rounded_to(dtype: dtypes.DType) -> Step:
    """A step computed in float32, rounded to the half-precision ``dtype``."""
    return lambda e: ex.cast(ex.cast(e, dtype), dtypes.float32)


def _quotient(b: TensorBuilder, what: str, quotient: Callable[[Expr, Expr, Step | None], Expr],
              x: Operand, y: Operand) -> str:
    """``quotient(x, y)`` with ATen's rounding of half precision: a quotient by a tensor
    rounds each step to half precision; one by one number (ATen's ``is_scalar(2)`` path)
    reads that number as it is, computes in float32 and rounds only the result."""
    dtype = b.result_type(x, y)
    one_number = not isinstance(y, str) or math.prod(b.shape(y)) == 1
    half = dtype in HALF_TYPES
    step = _rounded_to(dtype) if half and not one_number else None
    return _elementwise(b, what, lambda a, d: quotient(a, d, step), x, y, divisor_as_given=half and one_number)


def _binary(what: str, formula: Formula):
    def decompose(b: TensorBuilder, node: Node) -> str:
        return _elementwise(b, what, formula, operand(b, node.args[0]), operand(b, node.args[1]))

    return decompose


def decompose_div_mode(b: TensorBuilder, node: Node) -> str:
    """``div(self, other, *, rounding_mode)``: true division, or rounded towards zero or minus infinity."""
    x, y = operand(b, node.args[0]), operand(b, node.args[1])
    mode = argument(node, 2, "rounding_mode")
    if mode is None:
        return b.binary("div", x, y)
    if mode == "trunc":
        return _quotient(b, "div_trunc", truncating_quotient, x, y)
    if mode == "floor":
        return _quotient(b, "div_floor", floor_quotient, x, y)
    raise b.fail(f"rounding_mode must be None, 'trunc' or 'floor', got {mode!r}")


def decompose_floor_divide(b: TensorBuilder, node: Node) -> str:
    return _quotient(b, "floor_divide", floor_quotient, operand(b, node.args[0]), operand(b, node.args[1]))


def _rounding(opname: str):
    """``floor``, ``ceil``, ``trunc``, ``round``: the value itself for integers, as in PyTorch."""

    def decompose(b: TensorBuilder, node: Node) -> str:
        x = tensor(b, node)
        dtype = b.dtype(x)
        if dtype == dtypes.bool_:
            raise b.fail(f"{opname} is not defined for bool tensors (PyTorch refuses them too); "
                         f"cast {x} to a number type")
        if not dtype.is_float:
            return x
        compute = compute_dtype(dtype)
        return b.elementwise(ex.cast(ex.op(opname, ex.cast(Arg(0, dtype), compute)), dtype), [x], role=opname)

    return decompose


DECOMPOSITIONS = {
    "aten.div.Tensor_mode": decompose_div_mode,
    "aten.div.Scalar_mode": decompose_div_mode,
    "aten.floor_divide.default": decompose_floor_divide,
    "aten.floor_divide.Scalar": decompose_floor_divide,
    "aten.remainder.Tensor": _binary("remainder", floor_remainder),
    "aten.remainder.Scalar": _binary("remainder", floor_remainder),
    "aten.remainder.Scalar_Tensor": _binary("remainder", floor_remainder),
    "aten.fmod.Tensor": _binary("fmod", truncated_remainder),
    "aten.fmod.Scalar": _binary("fmod", truncated_remainder),
    **{f"aten.{name}.default": _rounding(name) for name in ("floor", "ceil", "trunc", "round")},
}

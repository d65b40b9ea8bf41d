"""The scalar operators of ``lamina.core.ir.expr`` as PyTorch CPU operations.

The interpreter and the simulator both evaluate expressions elementwise over
tensors; this is the one place that says what each operator means, with CUDA's
semantics where PyTorch's differ (integer division of non-negative operands rounds
towards zero in C, which is floor division there). Integer arithmetic runs in the
operation's own type, so that ``uint8`` and ``int8`` wrap around as in PyTorch.

Integer ``truncdiv`` and ``fmod`` by zero are undefined in C (a GPU gives some value, no
error) and an error in PyTorch: here they raise a ``LaminaError``.
"""

from __future__ import annotations

import torch

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes
from lamina.core.ir.dtypes import DType


def torch_dtype(dtype: DType) -> torch.dtype:
    return getattr(torch, dtype.name)


def _floordiv(a, b):
    return torch.div(a, b, rounding_mode="floor")


def _truncdiv(a, b):
    return torch.div(a, b, rounding_mode="trunc")


_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "max": torch.maximum,
    "min": torch.minimum,
    "pow": torch.pow,
    "floordiv": _floordiv,
    "mod": torch.remainder,
    "truncdiv": _truncdiv,
    "fmod": torch.fmod,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "eq": torch.eq,
    "ne": torch.ne,
    "and": torch.logical_and,
    "or": torch.logical_or,
}

_UNARY = {
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "sin": torch.sin,
    "cos": torch.cos,
    "erf": torch.erf,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "round": torch.round,
    "not": torch.logical_not,
}


def as_tensor(value, dtype: DType) -> torch.Tensor:
    """A scalar or tensor as a tensor of ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value if value.dtype == torch_dtype(dtype) else value.to(torch_dtype(dtype))
    if isinstance(value, int) and not isinstance(value, bool) and dtypes.is_integer(dtype):
        value = dtypes.wrap(value, dtype)
    return torch.tensor(value, dtype=torch_dtype(dtype))


def apply_op(name: str, args: list, dtype: DType) -> torch.Tensor:
    """Apply operator ``name`` to ``args`` (tensors or Python scalars); the result has ``dtype``.

    Operands are converted to the operation's type first, as CUDA code converts
    them, so that float32 arithmetic stays float32.
    """
    if name == "cast":
        return as_tensor(args[0], dtype)
    if name == "where":
        cond = as_tensor(args[0], dtypes.bool_)
        return torch.where(cond, as_tensor(args[1], dtype), as_tensor(args[2], dtype))
    if name in ("lt", "le", "gt", "ge", "eq", "ne"):
        operand = _common_type(args)
        return _BINARY[name](as_tensor(args[0], operand), as_tensor(args[1], operand))
    if name in ("and", "or", "not"):
        operands = [as_tensor(a, dtypes.bool_) for a in args]
        return (_BINARY.get(name) or _UNARY[name])(*operands)
    operands = [as_tensor(a, dtype) for a in args]
    if name in ("truncdiv", "fmod") and not dtype.is_float and bool((operands[1] == 0).any()):
        raise LaminaError(f"integer division by zero in {name}: PyTorch raises ZeroDivisionError here, and a GPU "
                          "gives an unspecified value; keep integer divisors nonzero")
    if name in _BINARY:
        return _BINARY[name](*operands).to(torch_dtype(dtype))
    if name in _UNARY:
        return _UNARY[name](*operands).to(torch_dtype(dtype))
    raise KeyError(f"the reference backend has no implementation of scalar op {name!r}")


def _common_type(args) -> DType:
    found = None
    for a in args:
        if isinstance(a, torch.Tensor):
            d = dtypes.from_name(str(a.dtype).removeprefix("torch."))
        elif isinstance(a, bool):
            d = dtypes.bool_
        elif isinstance(a, int):
            d = dtypes.int64
        else:
            d = dtypes.float32
        found = d if found is None else dtypes.promote(found, d)
    return found

"""Element types, named as PyTorch names them (``float32``, ``bfloat16`` ...).

Integer types narrower than ``int`` (``int8``, ``uint8``, ``int16``) wrap around as
PyTorch's do: a value outside their range is taken modulo 2^bits (``wrap``).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class DType:
    name: str
    short: str
    itemsize: int
    is_float: bool
    c_type: str
    #: False only for ``uint8`` (and ``bool``, which is no number): it decides promotion and wrap-around.
    is_signed: bool = True

    def __str__(self) -> str:
        return self.short


float64 = DType("float64", "f64", 8, True, "double")
float32 = DType("float32", "f32", 4, True, "float")
float16 = DType("float16", "f16", 2, True, "__half")
bfloat16 = DType("bfloat16", "bf16", 2, True, "__nv_bfloat16")
int64 = DType("int64", "i64", 8, False, "long long")
int32 = DType("int32", "i32", 4, False, "int")
int16 = DType("int16", "i16", 2, False, "short")
int8 = DType("int8", "i8", 1, False, "signed char")
uint8 = DType("uint8", "u8", 1, False, "unsigned char", is_signed=False)
bool_ = DType("bool", "b8", 1, False, "bool", is_signed=False)

ALL = (float64, float32, float16, bfloat16, int64, int32, int16, int8, uint8, bool_)
BY_NAME = {d.name: d for d in ALL}
BY_SHORT = {d.short: d for d in ALL}

#: The type of loop variables and index arithmetic.
index = int64


def from_name(name: str) -> DType:
    """Look a dtype up by its PyTorch name (``float32``) or short name (``f32``)."""
    found = BY_NAME.get(name) or BY_SHORT.get(name)
    if found is None:
        from lamina.core.errors import LaminaError

        known = ", ".join(d.name for d in ALL)
        raise LaminaError(f"unknown dtype {name!r}; lamina knows {known}")
    return found


def is_integer(dtype: DType) -> bool:
    """An integer type proper: neither a float nor bool."""
    return not dtype.is_float and dtype != bool_


def integer_range(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer type (bool's are 0 and 1)."""
    if dtype == bool_:
        return 0, 1
    bits = 8 * dtype.itemsize
    if not dtype.is_signed:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def wrap(value: int, dtype: DType) -> int:
    """``value`` modulo 2^bits, in the range of integer type ``dtype``: what PyTorch stores."""
    low, high = integer_range(dtype)
    return (int(value) - low) % (high - low + 1) + low


def promote(a: DType, b: DType) -> DType:
    """The type of a binary arithmetic result, following PyTorch's promotion of tensors.

    bool < integers < floats; among integers the wider wins, except that ``uint8`` and
    ``int8`` hold each other's values only in ``int16``.
    """
    if a == b:
        return a
    if a.is_float != b.is_float:
        return a if a.is_float else b
    if a.is_float:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    if a == bool_:
        return b
    if b == bool_:
        return a
    if a.is_signed != b.is_signed:
        signed, unsigned = (a, b) if a.is_signed else (b, a)
        return signed if signed.itemsize > unsigned.itemsize else int16
    return a if a.itemsize > b.itemsize else b

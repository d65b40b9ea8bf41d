"""Element types, named as PyTorch names them (``float32``, ``bfloat16`` ...)."""

from __future__ import annotations

import attrs


@attrs.frozen
class DType:
    name: str
    short: str
    itemsize: int
    is_float: bool
    c_type: str

    def __str__(self) -> str:
        return self.short


float64 = DType("float64", "f64", 8, True, "double")
float32 = DType("float32", "f32", 4, True, "float")
float16 = DType("float16", "f16", 2, True, "__half")
bfloat16 = DType("bfloat16", "bf16", 2, True, "__nv_bfloat16")
int64 = DType("int64", "i64", 8, False, "long long")
int32 = DType("int32", "i32", 4, False, "int")
bool_ = DType("bool", "b8", 1, False, "bool")

ALL = (float64, float32, float16, bfloat16, int64, int32, bool_)
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


def promote(a: DType, b: DType) -> DType:
    """The type of a binary arithmetic result, following PyTorch's promotion of tensors."""
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
    return a if a.itemsize > b.itemsize else b

"""Writing a fuzzed program: its inputs, one line per op, and what is known of each value.

Each value carries its shape, dtype and a rough bound on its magnitude, from which the
generator decides which ops may follow without overflow.
"""

from __future__ import annotations

import math
import random

import attrs

SIZES = (1, 2, 3, 7, 8, 16, 33)
DTYPES = ("float32", "bfloat16", "int32")
MAX_ELEMENTS = 4096
MAX_RANK = 4
#: Integers stay below this magnitude; a value that might exceed it is clamped first.
INT_LIMIT = 2 ** 20
#: Floats above this magnitude are scaled down before ``exp`` or a product can overflow.
FLOAT_LIMIT = 1e4


@attrs.define
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    #: A rough upper bound on the magnitude of every element.
    bound: float
    is_input: bool = False

    @property
    def is_int(self) -> bool:
        return self.dtype.startswith("int")

    @property
    def exact(self) -> bool:
        """Whether every precision computes this value exactly, so discrete ops of it agree."""
        return self.is_input or self.is_int


def numel(shape) -> int:
    return math.prod(shape)


def shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


class Writer:
    """Writes one program: its inputs, its lines, and what each value is."""

    def __init__(self, seed: int, dtype: str):
        self.rng = random.Random(seed)
        self.seed = seed
        self.dtype = dtype
        self.input_lines: list[str] = []
        self.inputs: list[Value] = []
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.side_outputs: list[Value] = []

    # -- inputs and values

    def random_shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.rng.choice((1, 2, 2, 3, 3)) if rank is None else rank
        while True:
            shape = tuple(self.rng.choice(SIZES) for _ in range(rank))
            if numel(shape) <= MAX_ELEMENTS // 2:
                return shape

    def data_input(self, shape, dtype: str | None = None) -> Value:
        dtype = dtype or self.dtype
        name = f"x{len(self.inputs)}"
        if dtype.startswith("int"):
            # Odd numbers in [-9, 9]: small, and never zero.
            line = f"{name} = torch.randint(-5, 5, {shape_text(shape)}, dtype=torch.{dtype}) * 2 + 1"
            bound = 9.0
        else:
            cast = "" if dtype == "float32" else f".to(torch.{dtype})"
            sizes = ", ".join(map(str, shape)) if shape else "()"
            line = f"{name} = torch.randn({sizes}){cast}"
            bound = 4.0
        return self._add_input(name, line, Value(name, tuple(shape), dtype, bound, is_input=True))

    def index_input(self, shape, high: int, negative: bool = False) -> Value:
        name = f"i{len(self.inputs)}"
        low = -high if negative else 0
        line = f"{name} = torch.randint({low}, {high}, {shape_text(shape)})"
        return self._add_input(name, line, Value(name, tuple(shape), "int64", float(high), is_input=True))

    def _add_input(self, name: str, line: str, value: Value) -> Value:
        self.input_lines.append(line)
        self.inputs.append(value)
        return value

    def emit(self, expression: str, shape, dtype: str, bound: float) -> Value:
        name = f"v{len(self.values)}"
        self.lines.append(f"    {name} = {expression}")
        value = Value(name, tuple(shape), dtype, bound)
        self.values.append(value)
        return value

    # -- choices

    def size(self) -> int:
        return self.rng.choice(SIZES)

    def dim(self, value: Value) -> int:
        return self.rng.randrange(len(value.shape))

    def spelled_dim(self, value: Value, dim: int) -> int:
        """``dim`` as a program would write it: sometimes counted from the end."""
        return dim - len(value.shape) if self.rng.random() < 0.3 else dim

    def partner(self, value: Value) -> Value:
        """A value or new input of ``value``'s dtype that broadcasts with it (either way round)."""
        same = [v for v in self.values + self.inputs
                if v is not value and v.dtype == value.dtype and v not in self.side_outputs
                and (broadcasts_to(v.shape, value.shape) or broadcasts_to(value.shape, v.shape))
                and numel(broadcast_shape(v.shape, value.shape)) <= MAX_ELEMENTS]
        if same and self.rng.random() < 0.5:
            return self.rng.choice(same)
        shape = list(value.shape)
        form = self.rng.random()
        if form < 0.3 and shape:
            shape = shape[self.rng.randrange(len(shape)):]
        elif form < 0.6:
            shape = [1 if self.rng.random() < 0.5 else n for n in shape]
        return self.data_input(tuple(shape), value.dtype)

    def mask_input(self, shape) -> Value:
        """A float input of a shape that broadcasts to ``shape``, whose sign makes a mask."""
        shape = [1 if self.rng.random() < 0.3 else n for n in shape]
        return self.data_input(tuple(shape), "float32")


def broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(target)))


def broadcast_shape(a, b) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def index_text(dim: int, item: str) -> str:
    return "[" + ", ".join([":"] * dim + [item]) + "]"


def with_size(shape, dim: int, size: int) -> tuple[int, ...]:
    shape = list(shape)
    shape[dim] = size
    return tuple(shape)

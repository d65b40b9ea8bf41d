"""Random programs: short chains of the ops lamina supports, on small ragged sizes.

Each step applies one op to a recent value: elementwise math, a reduction, a matmul, a
reshape, a permute, a broadcast, a slice, a cat or an index. Every program is valid: logs
and roots see positive numbers, divisors stay away from zero, integers cannot overflow
(a rough bound on each value's magnitude decides which ops may follow), and index
tensors are in range. Discrete results (``argmax``, comparisons) are only taken of values
that every precision computes exactly: the program's inputs, or integers.
"""

from __future__ import annotations

import math
import random

import attrs

from lamina.testing.fuzz.program import Program

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


def _numel(shape) -> int:
    return math.prod(shape)


def _shape_text(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _float(x: float) -> str:
    return repr(float(x))


class _Writer:
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
            if _numel(shape) <= MAX_ELEMENTS // 2:
                return shape

    def data_input(self, shape, dtype: str | None = None) -> Value:
        dtype = dtype or self.dtype
        name = f"x{len(self.inputs)}"
        if dtype.startswith("int"):
            # Odd numbers in [-9, 9]: small, and never zero.
            line = f"{name} = torch.randint(-5, 5, {_shape_text(shape)}, dtype=torch.{dtype}) * 2 + 1"
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
        line = f"{name} = torch.randint({low}, {high}, {_shape_text(shape)})"
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
                and (_broadcasts_to(v.shape, value.shape) or _broadcasts_to(value.shape, v.shape))
                and _numel(_broadcast(v.shape, value.shape)) <= MAX_ELEMENTS]
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


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(reversed(shape), reversed(target)))


def _broadcast(a, b) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b))


def _index_text(rank: int, dim: int, item: str) -> str:
    return "[" + ", ".join([":"] * dim + [item]) + "]"


# -- elementwise

FLOAT_UNARY = (
    ("torch.tanh({})", lambda b: 1.0),
    ("torch.sigmoid({})", lambda b: 1.0),
    ("torch.sin({})", lambda b: 1.0),
    ("torch.cos({})", lambda b: 1.0),
    ("torch.erf({})", lambda b: 1.0),
    ("-{}", lambda b: b),
    ("{}.abs()", lambda b: b),
    ("torch.relu({})", lambda b: b),
    ("torch.nn.functional.silu({})", lambda b: b),
    ("torch.nn.functional.gelu({})", lambda b: b),
    ("torch.exp({})", math.exp),
    ("torch.log({}.abs() + 1)", lambda b: math.log(b + 1)),
    ("torch.sqrt({}.abs() + 0.5)", lambda b: math.sqrt(b + 0.5)),
    ("torch.rsqrt({}.abs() + 1)", lambda b: 1.0),
    ("torch.reciprocal({}.abs() + 1)", lambda b: 1.0),
    ("{} ** 2", lambda b: b * b),
    ("{}.clamp(-1.5, 0.75)", lambda b: 1.5),
    ("{}.clamp(min=-0.5)", lambda b: b),
    ("{} * 0.5", lambda b: b / 2),
    ("{} + 1.25", lambda b: b + 1.25),
    ("2.0 - {}", lambda b: b + 2),
)
INT_UNARY = (
    ("-{}", lambda b: b),
    ("{}.abs()", lambda b: b),
    ("{} * 3", lambda b: 3 * b),
    ("{} - 4", lambda b: b + 4),
    ("{}.clamp(-6, 5)", lambda b: 6.0),
    ("torch.where({0} > 2, {0}, -{0})", lambda b: b),
)
FLOAT_BINARY = (
    ("{} + {}", lambda a, b: a + b),
    ("{} - {}", lambda a, b: a + b),
    ("{} * {}", lambda a, b: a * b),
    ("{} / ({}.abs() + 1)", lambda a, b: a),
    ("torch.maximum({}, {})", max),
    ("torch.minimum({}, {})", max),
)
INT_BINARY = FLOAT_BINARY[:3] + FLOAT_BINARY[4:] + (
    ("{} // ({}.abs() + 1)", lambda a, b: a),
    ("{} % ({}.abs() + 1)", lambda a, b: b + 1),
    ("{} // -({}.abs() + 2)", lambda a, b: a),
    ("{} % -({}.abs() + 2)", lambda a, b: b + 2),
    ("torch.where({0} > {1}, {0}, {1})", max),
)


def unary(w: _Writer, v: Value) -> Value | None:
    table = INT_UNARY if v.is_int else FLOAT_UNARY
    template, bound = w.rng.choice(table)
    if template.startswith("torch.exp") and v.bound > 6:
        template, bound = "torch.exp(torch.tanh({}))", lambda b: math.e
    return w.emit(template.format(v.name), v.shape, v.dtype, bound(v.bound))


def binary(w: _Writer, v: Value) -> Value | None:
    other = w.partner(v)
    a, b = (v, other) if w.rng.random() < 0.7 else (other, v)
    table = INT_BINARY if v.is_int else FLOAT_BINARY
    template, bound = w.rng.choice(table)
    return w.emit(template.format(a.name, b.name), _broadcast(a.shape, b.shape), v.dtype, bound(a.bound, b.bound))


def select_where(w: _Writer, v: Value) -> Value | None:
    """``torch.where`` on the sign of an input: a mask that every precision agrees on."""
    other = w.partner(v)
    mask = w.mask_input(v.shape)
    shape = _broadcast(_broadcast(mask.shape, v.shape), other.shape)
    return w.emit(f"torch.where({mask.name} > 0, {v.name}, {other.name})", shape, v.dtype, max(v.bound, other.bound))


# -- reductions


def reduction(w: _Writer, v: Value) -> Value | None:
    if not v.shape:
        return None
    dim = w.dim(v)
    n = v.shape[dim]
    spelled = w.spelled_dim(v, dim)
    keepdim = w.rng.random() < 0.3
    kept = tuple(1 if k == dim else s for k, s in enumerate(v.shape)) if keepdim else \
        tuple(s for k, s in enumerate(v.shape) if k != dim)
    keep_text = ", keepdim=True" if keepdim else ""
    choices = [
        (f"{v.name}.sum({spelled}{keep_text})", kept, v.bound * n),
        (f"{v.name}.amax({spelled}{keep_text})", kept, v.bound),
        (f"{v.name}.amin({spelled}{keep_text})", kept, v.bound),
        (f"{v.name}.max({spelled}{keep_text}).values", kept, v.bound),
        (f"{v.name}.min({spelled}{keep_text}).values", kept, v.bound),
    ]
    if not v.is_int:
        choices += [
            (f"{v.name}.mean({spelled}{keep_text})", kept, v.bound),
            (f"torch.softmax({v.name}, {spelled})", v.shape, 1.0),
            (f"torch.log_softmax({v.name}, {spelled})", v.shape, 2 * v.bound + math.log(n)),
        ]
        if n > 1:
            choices.append((f"{v.name}.var({spelled}{keep_text})", kept, 4 * v.bound * v.bound))
    if n <= 8 and v.bound ** n < (INT_LIMIT if v.is_int else FLOAT_LIMIT):
        choices.append((f"{v.name}.prod({spelled}{keep_text})", kept, v.bound ** n))
    if len(v.shape) >= 2 and w.rng.random() < 0.2:
        dims = sorted(w.rng.sample(range(len(v.shape)), 2))
        count = v.shape[dims[0]] * v.shape[dims[1]]
        rest = tuple(s for k, s in enumerate(v.shape) if k not in dims)
        pair = f"({w.spelled_dim(v, dims[0])}, {w.spelled_dim(v, dims[1])})"
        choices = [(f"{v.name}.sum({pair})", rest, v.bound * count), (f"{v.name}.amax({pair})", rest, v.bound)]
        if not v.is_int:
            choices.append((f"{v.name}.mean({pair})", rest, v.bound))
    if _numel(v.shape) > 1 and w.rng.random() < 0.15:
        whole = [(f"{v.name}.sum()", (), v.bound * _numel(v.shape)), (f"{v.name}.amax()", (), v.bound),
                 (f"{v.name}.max()", (), v.bound), (f"{v.name}.min()", (), v.bound)]
        if not v.is_int:
            whole.append((f"{v.name}.mean()", (), v.bound))
        choices = whole
    text, shape, bound = w.rng.choice(choices)
    dtype = "int64" if v.is_int and (".sum(" in text or ".prod(" in text) else v.dtype
    return w.emit(text, shape, dtype, bound)


def arg_reduction(w: _Writer, v: Value) -> Value | None:
    """``argmax`` and friends: indices, taken only of exact values, returned beside the chain."""
    candidates = [u for u in w.values + w.inputs if u.exact and u.shape and u not in w.side_outputs]
    if not candidates:
        return None
    u = w.rng.choice(candidates)
    dim = w.spelled_dim(u, w.dim(u))
    text = w.rng.choice((f"{u.name}.argmax({dim})", f"{u.name}.argmin({dim})",
                         f"{u.name}.max({dim}).indices", f"{u.name}.min({dim}).indices"))
    kept = tuple(s for k, s in enumerate(u.shape) if k != dim % len(u.shape))
    side = w.emit(text, kept, "int64", 0.0)
    w.side_outputs.append(side)
    return None


# -- matmul


def matmul(w: _Writer, v: Value) -> Value | None:
    if not v.shape or len(v.shape) > 3:
        return None
    k = v.shape[-1]
    n = w.size()
    batch, rows = v.shape[:-2], v.shape[:-1]
    forms = []
    if len(v.shape) <= 3:
        forms.append("weight")
    if len(v.shape) == 3:
        forms.append("bmm")
    if len(v.shape) in (2, 3) and not v.is_int:
        forms.append("linear")
    if len(v.shape) in (2, 3):
        forms.append("gram")
    form = w.rng.choice(forms)
    if _numel(rows) * n > MAX_ELEMENTS:
        return None
    if form == "weight":
        weight = w.data_input((k, n), v.dtype)
        return w.emit(f"{v.name} @ {weight.name}", rows + (n,), v.dtype, k * v.bound * weight.bound)
    if form == "bmm":
        weight = w.data_input((v.shape[0], k, n), v.dtype)
        return w.emit(f"torch.bmm({v.name}, {weight.name})", rows + (n,), v.dtype, k * v.bound * weight.bound)
    if form == "linear":
        weight, bias = w.data_input((n, k), v.dtype), w.data_input((n,), v.dtype)
        return w.emit(f"torch.nn.functional.linear({v.name}, {weight.name}, {bias.name})", rows + (n,), v.dtype,
                      k * v.bound * weight.bound + bias.bound)
    m = v.shape[-2]
    if _numel(batch) * m * m > MAX_ELEMENTS:
        return None
    others = [u for u in w.values + w.inputs if u.shape == v.shape and u.dtype == v.dtype]
    u = w.rng.choice(others)
    return w.emit(f"{v.name} @ {u.name}.mT", batch + (m, m), v.dtype, k * v.bound * u.bound)


# -- shapes: reshape, permute, broadcast, slice, cat, index


def reshape(w: _Writer, v: Value) -> Value | None:
    shape = list(v.shape)
    options = []
    if len(shape) >= 2:
        i = w.rng.randrange(len(shape) - 1)
        options.append(shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:])
        options.append([_numel(shape)])
    splits = [(i, f) for i, n in enumerate(shape) for f in (2, 3, 4) if n % f == 0 and n > f]
    if splits and len(shape) < MAX_RANK:
        i, f = w.rng.choice(splits)
        options.append(shape[:i] + [f, shape[i] // f] + shape[i + 1:])
    if not options:
        return None
    new = w.rng.choice(options)
    spelled = list(new)
    if w.rng.random() < 0.3:
        spelled[w.rng.randrange(len(new))] = -1
    method = w.rng.choice(("reshape", "reshape", "view")) if v.is_input else "reshape"
    return w.emit(f"{v.name}.{method}({', '.join(map(str, spelled))})", new, v.dtype, v.bound)


def squeeze_or_unsqueeze(w: _Writer, v: Value) -> Value | None:
    ones = [k for k, n in enumerate(v.shape) if n == 1]
    if ones and w.rng.random() < 0.5:
        dim = w.rng.choice(ones)
        return w.emit(f"{v.name}.squeeze({dim})", v.shape[:dim] + v.shape[dim + 1:], v.dtype, v.bound)
    if len(v.shape) >= MAX_RANK:
        return None
    dim = w.rng.randrange(len(v.shape) + 1)
    return w.emit(f"{v.name}.unsqueeze({dim})", v.shape[:dim] + (1,) + v.shape[dim:], v.dtype, v.bound)


def permute(w: _Writer, v: Value) -> Value | None:
    rank = len(v.shape)
    if rank < 2:
        return None
    if rank == 2 and w.rng.random() < 0.4:
        return w.emit(f"{v.name}.t()", v.shape[::-1], v.dtype, v.bound)
    if w.rng.random() < 0.4:
        a, b = w.rng.sample(range(rank), 2)
        shape = list(v.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return w.emit(f"{v.name}.transpose({a}, {b})", shape, v.dtype, v.bound)
    order = list(range(rank))
    while order == sorted(order):
        w.rng.shuffle(order)
    return w.emit(f"{v.name}.permute({', '.join(map(str, order))})", [v.shape[k] for k in order], v.dtype, v.bound)


def expand(w: _Writer, v: Value) -> Value | None:
    ones = [k for k, n in enumerate(v.shape) if n == 1]
    if ones and w.rng.random() < 0.6:
        shape = list(v.shape)
        for k in ones:
            shape[k] = w.size()
        if _numel(shape) > MAX_ELEMENTS:
            return None
        spelled = [n if k in ones else -1 for k, n in enumerate(shape)]
        return w.emit(f"{v.name}.expand({', '.join(map(str, spelled))})", shape, v.dtype, v.bound)
    if len(v.shape) >= MAX_RANK:
        return None
    n = w.size()
    if n * _numel(v.shape) > MAX_ELEMENTS:
        return None
    return w.emit(f"{v.name}.expand({', '.join(map(str, (n,) + v.shape))})", (n,) + v.shape, v.dtype, v.bound)


def slice_(w: _Writer, v: Value) -> Value | None:
    dims = [k for k, n in enumerate(v.shape) if n >= 2]
    if not dims:
        return None
    dim = w.rng.choice(dims)
    n = v.shape[dim]
    form = w.rng.random()
    if form < 0.2:
        start, length = w.rng.randrange(n), 1
        length = w.rng.randint(1, n - start)
        return w.emit(f"{v.name}.narrow({dim}, {start}, {length})", _with(v.shape, dim, length), v.dtype, v.bound)
    if form < 0.35:
        k = w.rng.randint(1, n - 1)
        return w.emit(f"{v.name}{_index_text(len(v.shape), dim, f'-{k}:')}", _with(v.shape, dim, k), v.dtype, v.bound)
    start = w.rng.randrange(n)
    stop = w.rng.randint(start + 1, n)
    step = w.rng.choice((1, 1, 2, 3))
    item = f"{start or ''}:{stop if stop < n else ''}" + (f":{step}" if step > 1 else "")
    length = len(range(start, stop, step))
    return w.emit(f"{v.name}{_index_text(len(v.shape), dim, item)}", _with(v.shape, dim, length), v.dtype, v.bound)


def _with(shape, dim: int, size: int) -> tuple[int, ...]:
    shape = list(shape)
    shape[dim] = size
    return tuple(shape)


def cat(w: _Writer, v: Value) -> Value | None:
    if not v.shape:
        return None
    dim = w.dim(v)
    if w.rng.random() < 0.2 and len(v.shape) < MAX_RANK and 2 * _numel(v.shape) <= MAX_ELEMENTS:
        others = [u for u in w.values + w.inputs if u.shape == v.shape and u.dtype == v.dtype]
        u = w.rng.choice(others)
        dim = w.rng.randrange(len(v.shape) + 1)
        shape = v.shape[:dim] + (2,) + v.shape[dim:]
        return w.emit(f"torch.stack([{v.name}, {u.name}], {dim})", shape, v.dtype, max(v.bound, u.bound))
    matching = [u for u in w.values + w.inputs
                if u is not v and u.dtype == v.dtype and len(u.shape) == len(v.shape)
                and all(a == b for k, (a, b) in enumerate(zip(u.shape, v.shape)) if k != dim)]
    if matching and w.rng.random() < 0.5:
        u = w.rng.choice(matching)
    else:
        u = w.data_input(_with(v.shape, dim, w.size()), v.dtype)
    shape = _with(v.shape, dim, v.shape[dim] + u.shape[dim])
    if _numel(shape) > MAX_ELEMENTS:
        return None
    parts = [v.name, u.name] if w.rng.random() < 0.6 else [u.name, v.name]
    if w.rng.random() < 0.25 and _numel(_with(shape, dim, shape[dim] + v.shape[dim])) <= MAX_ELEMENTS:
        parts.append(v.name)
        shape = _with(shape, dim, shape[dim] + v.shape[dim])
    spelled = w.spelled_dim(v, dim)
    return w.emit(f"torch.cat([{', '.join(parts)}], {spelled})", shape, v.dtype, max(v.bound, u.bound))


def index(w: _Writer, v: Value) -> Value | None:
    if not v.shape:
        return None
    dim = w.dim(v)
    n = v.shape[dim]
    form = w.rng.random()
    if form < 0.25:
        k = w.rng.randrange(-n, n)
        return w.emit(f"{v.name}{_index_text(len(v.shape), dim, str(k))}", v.shape[:dim] + v.shape[dim + 1:],
                      v.dtype, v.bound)
    count = w.size()
    if _numel(_with(v.shape, dim, count)) > MAX_ELEMENTS:
        return None
    if form < 0.35 and len(v.shape) >= 2 and v.shape[0] * v.shape[1] > 1:
        i, j = w.index_input((count,), v.shape[0]), w.index_input((count,), v.shape[1])
        return w.emit(f"{v.name}[{i.name}, {j.name}]", (count,) + v.shape[2:], v.dtype, v.bound)
    if form < 0.55:
        i = w.index_input((count,), n, negative=w.rng.random() < 0.3)
        return w.emit(f"{v.name}{_index_text(len(v.shape), dim, i.name)}", _with(v.shape, dim, count), v.dtype, v.bound)
    if form < 0.8:
        i = w.index_input((count,), n)
        return w.emit(f"{v.name}.index_select({dim}, {i.name})", _with(v.shape, dim, count), v.dtype, v.bound)
    shape = tuple(count if k == dim else w.rng.randint(1, s) for k, s in enumerate(v.shape))
    i = w.index_input(shape, n)
    return w.emit(f"torch.gather({v.name}, {dim}, {i.name})", shape, v.dtype, v.bound)


def other_shape_op(w: _Writer, v: Value) -> Value | None:
    """Less common ops lamina supports: repeat, split, unbind, pad, tril, masked_fill, cumsum."""
    if not v.shape:
        return None
    dim = w.dim(v)
    n = v.shape[dim]
    form = w.rng.randrange(7)
    if form == 0 and 2 * _numel(v.shape) <= MAX_ELEMENTS:
        times = [1] * len(v.shape)
        times[dim] = 2
        return w.emit(f"{v.name}.repeat({', '.join(map(str, times))})", _with(v.shape, dim, 2 * n), v.dtype, v.bound)
    if form == 1 and n >= 2:
        size = w.rng.randint(1, n - 1)
        pieces = list(range(0, n, size))
        k = w.rng.randrange(len(pieces))
        length = min(size, n - pieces[k])
        return w.emit(f"{v.name}.split({size}, {dim})[{k}]", _with(v.shape, dim, length), v.dtype, v.bound)
    if form == 2:
        k = w.rng.randrange(n)
        return w.emit(f"{v.name}.unbind({dim})[{k}]", v.shape[:dim] + v.shape[dim + 1:], v.dtype, v.bound)
    if form == 3 and not v.is_int:
        before, after = w.rng.randint(0, 2), w.rng.randint(1, 3)
        shape = _with(v.shape, len(v.shape) - 1, v.shape[-1] + before + after)
        return w.emit(f"torch.nn.functional.pad({v.name}, ({before}, {after}), value=0.5)", shape, v.dtype,
                      max(v.bound, 0.5))
    if form == 4 and len(v.shape) >= 2:
        diagonal = w.rng.randint(-1, 1)
        function = w.rng.choice(("tril", "triu"))
        return w.emit(f"torch.{function}({v.name}, {diagonal})", v.shape, v.dtype, v.bound)
    if form == 5:
        mask = w.mask_input(v.shape)
        fill = "3" if v.is_int else "0.5"
        shape = _broadcast(mask.shape, v.shape)
        return w.emit(f"{v.name}.masked_fill({mask.name} > 0, {fill})", shape, v.dtype, max(v.bound, 3.0))
    if form == 6:
        dtype = "int64" if v.is_int else v.dtype
        return w.emit(f"{v.name}.cumsum({w.spelled_dim(v, dim)})", v.shape, dtype, v.bound * n)
    return None


OPS = (
    (unary, 5), (binary, 4), (select_where, 1), (reduction, 3), (arg_reduction, 1), (matmul, 2),
    (reshape, 2), (squeeze_or_unsqueeze, 1), (permute, 2), (expand, 1), (slice_, 2), (cat, 2), (index, 2),
    (other_shape_op, 1),
)


def _tame(w: _Writer, v: Value) -> Value:
    """Scale or clamp ``v`` when later ops could overflow it."""
    if v.is_int and v.bound > INT_LIMIT:
        return w.emit(f"{v.name}.clamp(-1000, 1000)", v.shape, v.dtype, 1000.0)
    if not v.is_int and v.bound > FLOAT_LIMIT:
        return w.emit(f"torch.tanh({v.name})", v.shape, v.dtype, 1.0)
    return v


def generate(seed: int, dtype: str | None = None, steps: int | None = None) -> Program:
    """The program of ``seed``: its dtype (else chosen by the seed) and 2 to 8 steps of ops."""
    dtype = dtype or DTYPES[seed % len(DTYPES)]
    w = _Writer(seed, dtype)
    current = w.data_input(w.random_shape())
    if w.rng.random() < 0.4:
        w.data_input(w.random_shape())
    functions, weights = zip(*OPS)
    steps = steps if steps is not None else w.rng.randint(2, 8)
    made = 0
    while made < steps:
        if w.values and w.rng.random() < 0.25:
            current = w.rng.choice([v for v in w.values if v not in w.side_outputs] + w.inputs[:1])
        op = w.rng.choices(functions, weights)[0]
        result = op(w, current)
        if result is not None:
            current = _tame(w, result)
            made += 1
    if current.is_input:
        current = [v for v in w.values if v not in w.side_outputs][-1]
    outputs = [current]
    earlier = [v for v in w.values if v is not current and v not in w.side_outputs]
    if earlier and w.rng.random() < 0.3:
        outputs.append(w.rng.choice(earlier))
    outputs += w.side_outputs
    names = ", ".join(v.name for v in w.inputs)
    body = w.lines + [f"    return {', '.join(v.name for v in outputs)}"]
    source = f"def program({names}):\n" + "\n".join(body) + "\n"
    return Program(seed, dtype, source, tuple(w.input_lines), tuple(v.name for v in w.inputs))

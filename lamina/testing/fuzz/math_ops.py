"""The generator's elementwise math, reductions and matmuls.

Each takes the writer and a value and writes one line applying an op to it, or returns
None where the op does not fit the value.
"""

from __future__ import annotations

import math

from lamina.testing.fuzz.writer import FLOAT_LIMIT, INT_LIMIT, MAX_ELEMENTS, Value, Writer, broadcast_shape, numel

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


def unary(w: Writer, v: Value) -> Value | None:
    table = INT_UNARY if v.is_int else FLOAT_UNARY
    template, bound = w.rng.choice(table)
    if template.startswith("torch.exp") and v.bound > 6:
        template, bound = "torch.exp(torch.tanh({}))", lambda b: math.e
    return w.emit(template.format(v.name), v.shape, v.dtype, bound(v.bound))


def binary(w: Writer, v: Value) -> Value | None:
    other = w.partner(v)
    a, b = (v, other) if w.rng.random() < 0.7 else (other, v)
    table = INT_BINARY if v.is_int else FLOAT_BINARY
    template, bound = w.rng.choice(table)
    return w.emit(template.format(a.name, b.name), broadcast_shape(a.shape, b.shape), v.dtype, bound(a.bound, b.bound))


def select_where(w: Writer, v: Value) -> Value | None:
    """``torch.where`` on the sign of an input: a mask that every precision agrees on."""
    other = w.partner(v)
    mask = w.mask_input(v.shape)
    shape = broadcast_shape(broadcast_shape(mask.shape, v.shape), other.shape)
    return w.emit(f"torch.where({mask.name} > 0, {v.name}, {other.name})", shape, v.dtype, max(v.bound, other.bound))


# -- reductions


def reduction(w: Writer, v: Value) -> Value | None:
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
    if numel(v.shape) > 1 and w.rng.random() < 0.15:
        whole = [(f"{v.name}.sum()", (), v.bound * numel(v.shape)), (f"{v.name}.amax()", (), v.bound),
                 (f"{v.name}.max()", (), v.bound), (f"{v.name}.min()", (), v.bound)]
        if not v.is_int:
            whole.append((f"{v.name}.mean()", (), v.bound))
        choices = whole
    text, shape, bound = w.rng.choice(choices)
    dtype = "int64" if v.is_int and (".sum(" in text or ".prod(" in text) else v.dtype
    return w.emit(text, shape, dtype, bound)


def arg_reduction(w: Writer, v: Value) -> Value | None:
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


def matmul(w: Writer, v: Value) -> Value | None:
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
    if numel(rows) * n > MAX_ELEMENTS:
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
    if numel(batch) * m * m > MAX_ELEMENTS:
        return None
    others = [u for u in w.values + w.inputs if u.shape == v.shape and u.dtype == v.dtype]
    u = w.rng.choice(others)
    return w.emit(f"{v.name} @ {u.name}.mT", batch + (m, m), v.dtype, k * v.bound * u.bound)

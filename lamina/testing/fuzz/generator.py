"""Random programs: short chains of the ops lamina supports, on small ragged sizes.

Each step applies one op to a recent value: elementwise math, a reduction, a matmul, a
reshape, a permute, a broadcast, a slice, a cat or an index. Every program is valid: logs
and roots see positive numbers, divisors stay away from zero, integers cannot overflow
(a rough bound on each value's magnitude decides which ops may follow), and index
tensors are in range. Discrete results (``argmax``, comparisons) are only taken of values
that every precision computes exactly: the program's inputs, or integers.
"""

from __future__ import annotations

from lamina.testing.fuzz.math_ops import arg_reduction, binary, matmul, reduction, select_where, unary
from lamina.testing.fuzz.program import Program
from lamina.testing.fuzz.shape_ops import (
    cat, expand, index, other_shape_op, permute, reshape, slice_, squeeze_or_unsqueeze,
)
from lamina.testing.fuzz.writer import DTYPES, FLOAT_LIMIT, INT_LIMIT, Value, Writer

OPS = (
    (unary, 5), (binary, 4), (select_where, 1), (reduction, 3), (arg_reduction, 1), (matmul, 2),
    (reshape, 2), (squeeze_or_unsqueeze, 1), (permute, 2), (expand, 1), (slice_, 2), (cat, 2), (index, 2),
    (other_shape_op, 1),
)


def _tame(w: Writer, v: Value) -> Value:
    """Scale or clamp ``v`` when later ops could overflow it."""
    if v.is_int and v.bound > INT_LIMIT:
        return w.emit(f"{v.name}.clamp(-1000, 1000)", v.shape, v.dtype, 1000.0)
    if not v.is_int and v.bound > FLOAT_LIMIT:
        return w.emit(f"torch.tanh({v.name})", v.shape, v.dtype, 1.0)
    return v


def generate(seed: int, dtype: str | None = None, steps: int | None = None) -> Program:
    """The program of ``seed``: its dtype (else chosen by the seed) and 2 to 8 steps of ops."""
    dtype = dtype or DTYPES[seed % len(DTYPES)]
    w = Writer(seed, dtype)
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

"""Tensor IR -> Loop IR: one loop kernel per primitive, before any fusion.

Every value of the Tensor IR program becomes a buffer of the same name, written by
one kernel of that name. Parallel loop variables are ``i0, i1, ...``, reduction
loop variables ``r0, r1, ...`` and accumulators ``acc0, ...``, skipping any name a
buffer already uses so that the names stay distinct down to the CUDA text.
"""

from __future__ import annotations

import itertools
import math
import re

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, expr as ex, index, loop_ir, sizes, tensor_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.torch_ir import TensorType
from lamina.core.ir.names import fresh_name


def lower_to_loops(program: tensor_ir.Program) -> loop_ir.Program:
    """One kernel per Tensor IR op, plus a copy for each output that names an input or repeats.

    A value of no elements (the log-sum-exp that an attention op returns when asked for
    none) gets its buffer and no kernel: there is nothing to write."""
    types = program.types()
    taken = set(types)
    kernels = [_lower_op(o, types, taken) for o in program.ops if not sizes.is_empty(o.type.shape)]

    inputs = tuple(loop_ir.Buffer(v.name, v.type) for v in program.inputs)
    input_names = {v.name for v in program.inputs}
    outputs: list[loop_ir.Buffer] = []
    for name in program.outputs:
        if name not in types:
            raise LaminaError(f"Tensor IR output {name} is not an input or an op of the program; fix the program's outputs")
        if name in input_names or any(b.name == name for b in outputs):
            copy = fresh_name(f"{name}_copy", taken)
            kernels.append(_copy_kernel(name, copy, types[name], taken))
            types[copy] = types[name]
            name = copy
        outputs.append(loop_ir.Buffer(name, types[name]))
    output_names = {b.name for b in outputs}
    temporaries = tuple(loop_ir.Buffer(o.name, o.type) for o in program.ops if o.name not in output_names)
    result = loop_ir.Program(inputs, tuple(outputs), temporaries, tuple(kernels))
    loop_ir.verify_program(result)
    return result


def _series(prefix: str, count: int, taken: set[str]) -> tuple[str, ...]:
    """``count`` names ``prefix0, prefix1, ...`` that no buffer uses."""
    found: list[str] = []
    for k in itertools.count():
        if len(found) == count:
            break
        if f"{prefix}{k}" not in taken:
            found.append(f"{prefix}{k}")
    return tuple(found)


def kernel_name(buffer: str) -> str:
    """A C identifier for the kernel that writes ``buffer``."""
    name = re.sub(r"\W", "_", buffer, flags=re.ASCII)
    return name if name and not name[0].isdigit() else f"k_{name}"


def _parallel_nest(names: tuple[str, ...], extents: tuple[int, ...], body: tuple[loop_ir.Stmt, ...]) -> tuple[loop_ir.Stmt, ...]:
    for name, extent in reversed(tuple(zip(names, extents))):
        body = (loop_ir.Loop(name, extent, "parallel", body),)
    return body


def _kernel(name: str, types: dict[str, TensorType], output: loop_ir.Buffer, body) -> loop_ir.Kernel:
    """A kernel whose inputs are the buffers its body loads, in order of first load."""
    loaded = dict.fromkeys(load.buffer for load in loop_ir.loads(body))
    inputs = tuple(loop_ir.Buffer(n, types[n]) for n in loaded)
    return loop_ir.Kernel(kernel_name(name), inputs, (output,), body)


def _lower_op(o: tensor_ir.TensorOp, types: dict[str, TensorType], taken: set[str]) -> loop_ir.Kernel:
    for name in tensor_ir.op_inputs(o):
        if name not in types:
            raise LaminaError(f"Tensor IR op {o.name} reads {name}, which the program does not define")
    if isinstance(o, tensor_ir.Elementwise):
        return _lower_elementwise(o, types, taken)
    if isinstance(o, tensor_ir.IndexMap):
        return _lower_index_map(o, types, taken)
    if isinstance(o, tensor_ir.Reduction):
        return _lower_reduction(o, types, taken)
    raise LaminaError(f"Tensor IR op {o!r} is not an Elementwise, Reduction or IndexMap; Loop IR lowers only those")


def _lower_elementwise(o: tensor_ir.Elementwise, types, taken: set[str]) -> loop_ir.Kernel:
    shape = o.type.shape
    loop_vars = _series("i", len(shape), taken)
    idx = tuple(ex.Var(v) for v in loop_vars)

    def read(e: Expr) -> Expr | None:
        if isinstance(e, tensor_ir.Arg):
            source = o.inputs[e.position]
            return loop_ir.Load(source, idx, types[source].dtype)
        if isinstance(e, tensor_ir.Coord):
            return idx[e.axis]
        return None

    value = ex.transform(o.fn, read)
    store = loop_ir.Store(o.name, idx, ex.cast(value, o.type.dtype))
    return _kernel(o.name, types, loop_ir.Buffer(o.name, o.type), _parallel_nest(loop_vars, shape, (store,)))


def _lower_index_map(o: tensor_ir.IndexMap, types, taken: set[str]) -> loop_ir.Kernel:
    shape = o.type.shape
    loop_vars = _series("i", len(shape), taken)
    ranges = dict(zip(loop_vars, shape))
    rename = {d.name: ex.Var(v) for d, v in zip(tensor_ir.output_vars(len(shape)), loop_vars)}

    def gather(e: Expr) -> Expr | None:
        if isinstance(e, tensor_ir.Gathered):
            source = o.gathers[e.position]
            return ex.cast(loop_ir.Load(source, e.index, types[source].dtype), dtypes.index)
        return None

    source_index = tuple(index.simplify(ex.transform(ex.substitute(e, rename), gather), ranges) for e in o.index)
    value = loop_ir.Load(o.input, source_index, types[o.input].dtype)
    store = loop_ir.Store(o.name, tuple(ex.Var(v) for v in loop_vars), value)
    return _kernel(o.name, types, loop_ir.Buffer(o.name, o.type), _parallel_nest(loop_vars, shape, (store,)))


def _lower_reduction(o: tensor_ir.Reduction, types, taken: set[str]) -> loop_ir.Kernel:
    in_shape = types[o.input].shape
    if o.op not in tensor_ir.REDUCTIONS:
        raise LaminaError(f"reduction {o.name} uses {o.op!r}; Loop IR knows {', '.join(tensor_ir.REDUCTIONS)}")
    axes = set(o.axes)
    kept = [d for d in range(len(in_shape)) if d not in axes]
    runs = _adjacent_runs(sorted(axes))
    loop_vars = _series("i", len(kept), taken)
    reduce_vars = _series("r", len(runs), taken)
    (acc,) = _series("acc", 1, taken)
    var_of: dict[int, Expr] = {d: ex.Var(v) for d, v in zip(kept, loop_vars)}
    run_extents = [math.prod(in_shape[d] for d in run) for run in runs]
    for run, v, extent in zip(runs, reduce_vars, run_extents):
        inner_size = extent
        for d in run:
            inner_size //= in_shape[d]
            var_of[d] = index.simplify((ex.Var(v) // inner_size) % in_shape[d], {v: extent})

    source_index = tuple(var_of[d] for d in range(len(in_shape)))
    out_index: list[Expr] = []
    for d in range(len(in_shape)):
        if d in axes:
            if o.keepdim:
                out_index.append(ex.const(0))
        else:
            out_index.append(var_of[d])

    dtype = o.type.dtype
    loaded = ex.cast(loop_ir.Load(o.input, source_index, types[o.input].dtype), dtype)
    inner: tuple[loop_ir.Stmt, ...] = (loop_ir.Accumulate(acc, o.op, loaded),)
    for extent, v in reversed(tuple(zip(run_extents, reduce_vars))):
        inner = (loop_ir.Loop(v, extent, "reduce", inner),)
    identity = ex.Const(_identity(o.op, dtype), dtype)
    body = (
        loop_ir.Init(acc, identity),
        *inner,
        loop_ir.Store(o.name, tuple(out_index), ex.Var(acc, dtype)),
    )
    nest = _parallel_nest(loop_vars, tuple(in_shape[d] for d in kept), body)
    return _kernel(o.name, types, loop_ir.Buffer(o.name, o.type), nest)


def _adjacent_runs(axes: list[int]) -> list[list[int]]:
    """The reduced axes in runs of neighbours: each run is summed by one loop over its elements in
    row-major order (``mean`` over an image's height and width is one loop of ``h * w``), so that
    a schedule sees one row per output, as it would after a reshape, not a nest of short loops."""
    runs: list[list[int]] = []
    for d in axes:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _identity(op: str, dtype) -> float | int | bool:
    """The reduction's identity, within the range of ``dtype`` (an int32 min starts at 2**31 - 1, a uint8 max at 0)."""
    value = tensor_ir.reduction_identity(op, dtype)
    if dtype == dtypes.bool_:
        return op in ("prod", "min")
    if not dtype.is_float:
        low, high = dtypes.integer_range(dtype)
        return max(low, min(high, value))
    return value


def _copy_kernel(source: str, target: str, type: TensorType, taken: set[str]) -> loop_ir.Kernel:
    loop_vars = _series("i", len(type.shape), taken)
    idx = tuple(ex.Var(v) for v in loop_vars)
    store = loop_ir.Store(target, idx, loop_ir.Load(source, idx, type.dtype))
    body = _parallel_nest(loop_vars, type.shape, (store,))
    return _kernel(target, {source: type}, loop_ir.Buffer(target, type), body)

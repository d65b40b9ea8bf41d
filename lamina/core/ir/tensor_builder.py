"""The API that op decompositions program against: it appends Tensor IR primitives.

A decomposition receives a ``TensorBuilder`` and a Torch IR node, resolves the node's
tensor arguments with ``value``, builds its result with the three primitives
(``elementwise``, ``reduction``, ``index_map``) or with the conveniences below, which
are made of nothing else, and returns the name of the value holding the result.

Every op records the source line of the node being built (``with builder.at(node)``)
and is named after that node: ``mm_lhs``, ``mm_rhs``, ``mm_mul``, while the op that
holds the node's result takes the node's own name (``mm``), so that Tensor IR reads
like the Torch IR it came from.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from typing import Iterable, Iterator, Sequence

import attrs

from lamina.core.errors import LaminaError, SymbolicSizeError
from lamina.core.ir import dtypes, expr as ex, index as ix, sizes, tensor_ir
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import Expr
from lamina.core.ir.tensor_ir import Arg, Coord, Elementwise, Gathered, IndexMap, Reduction, TensorOp
from lamina.core.ir.torch_ir import Input, Node, Ref, SourceLocation, TensorType
from lamina.core.ir.shapes import broadcast_shape, shape_text, view_groups
from lamina.core.ir.type_promotion import Scalar, compute_dtype, number_dtype, result_type

Operand = str | Scalar
"""A tensor (the name of a Tensor IR value) or a Python number."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_C_KEYWORDS = frozenset(
    "alignas alignof asm auto bool break case catch char char16_t char32_t class const constexpr "
    "const_cast continue decltype default delete do double dynamic_cast else enum explicit export "
    "extern false float for friend goto if inline int long mutable namespace new noexcept nullptr "
    "operator private protected public register reinterpret_cast restrict return short signed "
    "sizeof static static_assert static_cast struct switch template this thread_local throw true "
    "try typedef typeid typename union unsigned using virtual void volatile wchar_t while".split()
)
_MATH = frozenset(name for name, info in ex.OPS.items() if info.kind == "math")
_LOGIC = frozenset(name for name, info in ex.OPS.items() if info.kind == "logic")
_OPERAND_ROLES = {1: ("arg",), 2: ("lhs", "rhs"), 3: ("cond", "lhs", "rhs")}


def _ref_name(arg: Ref | str) -> str:
    return arg.name if isinstance(arg, Ref) else arg


def _coordinates(index: Sequence[Expr | int], shape: tuple[int, ...]) -> tuple[Expr, ...]:
    """Index expressions simplified over the output's extents; an axis of size 1 reads as 0."""
    ranges = {v.name: s for v, s in zip(tensor_ir.output_vars(len(shape)), shape)}
    fixed = {name: ex.const(0) for name, s in ranges.items() if s == 1}

    def simplify_gathered(e: Expr) -> Expr | None:
        if isinstance(e, Gathered):
            return attrs.evolve(e, index=tuple(ix.simplify(i, ranges) for i in e.index))
        return None

    return tuple(
        ix.simplify(ex.transform(ex.substitute(ex.const(e) if isinstance(e, int) else e, fixed), simplify_gathered),
                    ranges)
        for e in index
    )


def _shift_gathered(e: Expr, by: int) -> Expr:
    """``e`` with every ``Gathered`` position moved up by ``by``."""
    return ex.transform(e, lambda n: attrs.evolve(n, position=n.position + by) if isinstance(n, Gathered) else None)


def _batch_index(shape: tuple[int, ...], batch: tuple[int, ...]) -> tuple[Expr, ...]:
    """How an operand's batch axes read the broadcast batch coordinates (0 where it has size 1)."""
    d = tensor_ir.output_vars(len(batch))
    lead = len(batch) - len(shape)
    return tuple(ex.const(0) if size == 1 else d[lead + k] for k, size in enumerate(shape))


class TensorBuilder:
    """Appends Tensor IR ops for the nodes of one Torch IR graph.

    ``reserved`` are names that no intermediate op may take (the graph's node names),
    so that each node's result can be named after its node.
    """

    def __init__(self, inputs: Sequence[Input], reserved: Iterable[str] = ()):
        self.ops: list[TensorOp] = []
        self._types: dict[str, TensorType] = {}
        self._position: dict[str, int] = {}
        self._bound: dict[str, str | tuple[str, ...]] = {}
        self._used: set[str] = set()
        self._reserved = set(reserved)
        self._node: Node | None = None
        self._node_start = 0
        values = []
        for inp in inputs:
            name = self._fresh(inp.name)
            self._types[name] = inp.type
            self._bound[inp.name] = name
            values.append(tensor_ir.Value(name, inp.type, inp.kind))
        self.inputs = tuple(values)

    # --- names, nodes and values ---------------------------------------------

    def _fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base)
        if not _IDENTIFIER.fullmatch(base):
            base = f"v_{base}"
        if base in _C_KEYWORDS:
            base = f"{base}_"
        for name in itertools.chain([base], (f"{base}_{k}" for k in itertools.count(1))):
            if name not in self._used and name not in self._reserved:
                self._used.add(name)
                return name
        raise AssertionError("unreachable")

    def _name(self, role: str) -> str:
        return self._fresh(f"{self._node.name}_{role}" if self._node is not None else role)

    @contextlib.contextmanager
    def at(self, node: Node) -> Iterator[None]:
        """Build ``node``: the ops created inside carry its source line and are named after it."""
        outer = self._node, self._node_start
        self._node, self._node_start = node, len(self.ops)
        try:
            yield
        finally:
            self._node, self._node_start = outer

    @property
    def source(self) -> SourceLocation | None:
        return self._node.source if self._node is not None else None

    def fail(self, message: str) -> LaminaError:
        """An error about the node being built, saying where in the user's program it comes from."""
        node = self._node
        if node is None:
            return LaminaError(message)
        where = f" at {node.source}" if node.source else ""
        return LaminaError(f"{node.name} = {node.target}(...){where}: {message}")

    def value(self, arg: Ref | str) -> str:
        """The Tensor IR value that holds a Torch IR value (a ``Ref`` or its name)."""
        bound = self.results(arg)
        if not isinstance(self._bound[_ref_name(arg)], str):
            raise self.fail(f"{_ref_name(arg)} holds {len(bound)} tensors, not one; pick one with getitem")
        return bound[0]

    def results(self, arg: Ref | str) -> tuple[str, ...]:
        """Every Tensor IR value that a Torch IR value holds (several for an op with several results)."""
        name = _ref_name(arg)
        if name not in self._bound:
            raise self.fail(f"{name} is used before it is defined")
        bound = self._bound[name]
        return (bound,) if isinstance(bound, str) else bound

    def filled_with(self, name: str) -> Scalar | None:
        """The constant that value ``name`` is filled with (``full``, ``ones``), else None."""
        position = self._position.get(name)
        op = self.ops[position] if position is not None else None
        if isinstance(op, Elementwise) and not op.inputs and isinstance(op.fn, ex.Const):
            return op.fn.value
        return None

    def bind(self, node: Node, result: str | Sequence[str]) -> None:
        """Record that ``result`` holds the value of ``node``; call it inside ``at(node)``.

        A result created while building ``node`` takes the node's own name.
        """
        if isinstance(result, (tuple, list)):
            self._bound[node.name] = tuple(self._check_value(r) for r in result)
        else:
            self._bound[node.name] = self._rename(self._check_value(result), node.name)

    def _check_value(self, name) -> str:
        if not isinstance(name, str) or name not in self._types:
            raise self.fail(f"the decomposition returned {name!r}, which is not a Tensor IR value")
        return name

    def _rename(self, old: str, new: str) -> str:
        position = self._position.get(old, -1)
        if position < self._node_start or new in self._used or new in _C_KEYWORDS or not _IDENTIFIER.fullmatch(new):
            return old

        def swap(name: str) -> str:
            return new if name == old else name

        for k in range(position, len(self.ops)):
            o = self.ops[k]
            if isinstance(o, Elementwise):
                self.ops[k] = attrs.evolve(o, name=swap(o.name), inputs=tuple(map(swap, o.inputs)))
            elif isinstance(o, IndexMap):
                self.ops[k] = attrs.evolve(o, name=swap(o.name), input=swap(o.input), gathers=tuple(map(swap, o.gathers)))
            else:
                self.ops[k] = attrs.evolve(o, name=swap(o.name), input=swap(o.input))
        self._types[new] = self._types.pop(old)
        self._position[new] = self._position.pop(old)
        self._used.add(new)
        return new

    def type(self, name: str) -> TensorType:
        if name not in self._types:
            raise self.fail(f"{name} is not a Tensor IR value")
        return self._types[name]

    def shape(self, name: str) -> tuple[int, ...]:
        return self.type(name).shape

    def dtype(self, name: str) -> DType:
        return self.type(name).dtype

    def axis(self, dim: int, rank: int) -> int:
        """``dim`` counted from the front (PyTorch allows negative dims)."""
        if not -max(rank, 1) <= dim < max(rank, 1):
            raise self.fail(f"dimension {dim} is out of range for a tensor of rank {rank}")
        return dim % max(rank, 1)

    # --- the three primitives --------------------------------------------------

    def _append(self, op: TensorOp) -> str:
        self._position[op.name] = len(self.ops)
        self.ops.append(op)
        self._types[op.name] = op.type
        return op.name

    def elementwise(self, fn: Expr, inputs: Sequence[str], shape: Sequence[int] | None = None,
                    *, role: str = "fn") -> str:
        """Apply ``fn`` (an expression over ``Arg`` leaves) to inputs of one shape."""
        if shape is None:
            if not inputs:
                raise self.fail("an Elementwise op without inputs needs a shape")
            shape = self.shape(inputs[0])
        out = TensorType(tuple(shape), fn.dtype)
        return self._append(Elementwise(self._name(role), tuple(inputs), fn, out, self.source))

    def reduction(self, input: str, axes: Sequence[int], op: str, keepdim: bool = False,
                  *, role: str | None = None) -> str:
        """Combine ``input`` along ``axes`` with ``op`` (sum, max, min, prod).

        Over axes of size 1 each result is its one element: ``input`` itself, or a view
        of it without those axes, so that no kernel loops over a single element."""
        in_type = self.type(input)
        axes = tuple(sorted({self.axis(a, len(in_type.shape)) for a in axes}))
        shape = tuple(1 if d in axes else s for d, s in enumerate(in_type.shape) if keepdim or d not in axes)
        if op in tensor_ir.REDUCTIONS and all(in_type.shape[a] == 1 for a in axes):
            kept = [d for d in range(len(in_type.shape)) if keepdim or d not in axes]
            out = tensor_ir.output_vars(len(shape))
            index = [out[kept.index(d)] if d in kept else ex.const(0) for d in range(len(in_type.shape))]
            return self._view(input, index, shape, role or op)
        out = TensorType(shape, in_type.dtype)
        return self._append(Reduction(self._name(role or op), input, axes, op, keepdim, out, self.source))

    def index_map(self, input: str, index: Sequence[Expr | int], shape: Sequence[int],
                  *, gathers: Sequence[str] = (), role: str = "map") -> str:
        """Read ``input`` at ``index``, expressions of the output coordinates ``tensor_ir.output_vars``.

        ``Gathered(k, ...)`` leaves of ``index`` read integers from ``gathers[k]``. An
        IndexMap of an IndexMap reads the first one's input directly: views of views (a
        transpose then a broadcast) become one op, and the inner one is dropped if
        nothing else reads it.
        """
        shape = tuple(shape)
        gathers = tuple(gathers)
        for name in gathers:
            if self.dtype(name).is_float or self.dtype(name) == dtypes.bool_:
                raise self.fail(f"{name} is {self.dtype(name).name}; indices must be integers")
        index = _coordinates(index, shape)
        producer = self.ops[self._position[input]] if input in self._position else None
        if isinstance(producer, IndexMap):
            inner = {v.name: e for v, e in zip(tensor_ir.output_vars(len(index)), index)}
            index = _coordinates([ex.substitute(_shift_gathered(e, len(gathers)), inner) for e in producer.index],
                                 shape)
            input, gathers = producer.input, gathers + producer.gathers
        out = TensorType(shape, self.dtype(input))
        return self._append(IndexMap(self._name(role), input, index, out, self.source, gathers))

    # --- views -------------------------------------------------------------------

    def _view(self, name: str, index: Sequence[Expr], shape: Sequence[int], role: str) -> str:
        """An IndexMap, or ``name`` itself when the map reads every element where it is."""
        shape = tuple(shape)
        identity = tuple(ex.const(0) if s == 1 else v for v, s in zip(tensor_ir.output_vars(len(shape)), shape))
        if shape == self.shape(name) and _coordinates(index, shape) == identity:
            return name
        return self.index_map(name, index, shape, role=role)

    def broadcast_to(self, name: str, shape: Sequence[int], *, role: str = "expand") -> str:
        shape = tuple(shape)
        src = self.shape(name)
        if broadcast_shape(src, shape) != shape:
            raise self.fail(f"cannot broadcast {name} of shape {shape_text(src)} to {shape_text(shape)}")
        d = tensor_ir.output_vars(len(shape))
        lead = len(shape) - len(src)
        index = [ex.const(0) if size == 1 else d[lead + k] for k, size in enumerate(src)]
        return self._view(name, index, shape, role)

    def broadcast(self, *names: str, roles: Sequence[str] | None = None) -> list[str]:
        """``names`` broadcast to their common shape (NumPy's rules)."""
        shape = broadcast_shape(*(self.shape(n) for n in names))
        if shape is None:
            shapes = ", ".join(f"{n} {shape_text(self.shape(n))}" for n in names)
            raise self.fail(f"shapes do not broadcast: {shapes}")
        roles = roles or ["expand"] * len(names)
        return [self.broadcast_to(n, shape, role=r) for n, r in zip(names, roles)]

    def expand(self, name: str, sizes: Sequence[int]) -> str:
        """``Tensor.expand``: -1 keeps a size."""
        src = self.shape(name)
        lead = len(sizes) - len(src)
        shape = [src[k - lead] if s == -1 else s for k, s in enumerate(sizes)]
        return self.broadcast_to(name, shape)

    def permute(self, name: str, dims: Sequence[int]) -> str:
        src = self.shape(name)
        dims = [self.axis(k, len(src)) for k in dims]
        if sorted(dims) != list(range(len(src))):
            raise self.fail(f"{list(dims)} is not a permutation of the {len(src)} axes of {name}")
        d = tensor_ir.output_vars(len(src))
        index = [d[dims.index(axis)] for axis in range(len(src))]
        return self._view(name, index, [src[k] for k in dims], "permute")

    def transpose(self, name: str, a: int, b: int) -> str:
        rank = len(self.shape(name))
        dims = list(range(rank))
        a, b = self.axis(a, rank), self.axis(b, rank)
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(name, dims)

    def reshape(self, name: str, shape: Sequence[int]) -> str:
        """A view of the contiguous tensor ``name`` with another shape (-1 infers one size)."""
        src = self.shape(name)
        shape = list(shape)
        total = sizes.numel(src)
        if shape.count(-1) == 1:
            known = sizes.numel([s for s in shape if not (isinstance(s, int) and s == -1)])
            shape[shape.index(-1)] = sizes.size(total // known) if known != 0 else 0
        if sizes.numel(shape) != total or any(isinstance(s, int) and s < 0 for s in shape):
            if sizes.is_symbolic(tuple(src) + tuple(shape)):
                raise SymbolicSizeError(f"cannot tell that [{', '.join(map(str, shape))}] holds the "
                                        f"{total} elements of {name}")
            raise self.fail(f"cannot view {name} of shape {shape_text(src)} as {shape_text(shape)}")
        d = tensor_ir.output_vars(len(shape))
        ranges = {v.name: s for v, s in zip(d, shape)}
        index: list[Expr] = [ex.const(0)] * len(src)
        for src_axes, dst_axes in view_groups(src, tuple(shape)):
            offset = ix.linearize(tuple(d[k] for k in dst_axes), tuple(shape[k] for k in dst_axes))
            coords = ix.delinearize(offset, tuple(src[k] for k in src_axes), ranges)
            for axis, coord in zip(src_axes, coords):
                index[axis] = coord
        return self._view(name, index, shape, "view")

    def unsqueeze(self, name: str, dim: int) -> str:
        src = self.shape(name)
        dim = self.axis(dim, len(src) + 1)
        d = tensor_ir.output_vars(len(src) + 1)
        index = [d[k] if k < dim else d[k + 1] for k in range(len(src))]
        return self._view(name, index, src[:dim] + (1,) + src[dim:], "unsqueeze")

    def squeeze(self, name: str, dims: int | Sequence[int] | None = None) -> str:
        """Drop the axes of size 1 among ``dims`` (all of them when None); others stay, as in PyTorch."""
        src = self.shape(name)
        if dims is None:
            dims = range(len(src))
        elif isinstance(dims, int):
            dims = [dims]
        dropped = {a for a in (self.axis(k, len(src)) for k in dims) if len(src) and src[a] == 1}
        kept = [a for a in range(len(src)) if a not in dropped]
        d = tensor_ir.output_vars(len(kept))
        index = [ex.const(0) if a in dropped else d[kept.index(a)] for a in range(len(src))]
        return self._view(name, index, [src[a] for a in kept], "squeeze")

    def slice(self, name: str, dim: int, start: sizes.Size | None, end: sizes.Size | None, step: int = 1,
              length: sizes.Size | None = None) -> str:
        """``x[..., start:end:step, ...]`` along ``dim``, with Python's clamping of the bounds. Where
        the axis or a bound is known only at run time, ``length`` is the slice's length as the
        frontend traced it (Dynamo's, which guards the clamping) and a negative ``start`` counts
        from the end."""
        src = self.shape(name)
        dim = self.axis(dim, len(src))
        shape = list(src)
        if sizes.is_symbolic((src[dim], start, end)):
            if length is None:
                raise SymbolicSizeError(f"slicing axis {dim} of {src[dim]} from {start} to {end} needs the "
                                        "slice's length")
            first = sizes.slice_start(src[dim], start, end, length, step)
            shape[dim] = length
        else:
            first, stop, step = slice(start, end, step).indices(src[dim])
            shape[dim] = len(range(first, stop, step))
        d = tensor_ir.output_vars(len(src))
        index = list(d)
        index[dim] = d[dim] * step + first
        return self._view(name, index, shape, "slice")

    def repeat(self, name: str, repeats: Sequence[int]) -> str:
        """``Tensor.repeat``: tile the tensor ``repeats[k]`` times along axis k (leading axes are new)."""
        src = self.shape(name)
        lead = len(repeats) - len(src)
        if lead < 0:
            raise self.fail(f"repeat needs at least {len(src)} counts for {name}, got {list(repeats)}")
        padded = (1,) * lead + src
        d = tensor_ir.output_vars(len(repeats))
        index = [d[lead + k] % size for k, size in enumerate(src)]
        return self._view(name, index, [s * r for s, r in zip(padded, repeats)], "repeat")

    def select(self, name: str, dim: int, position: int) -> str:
        """``x[..., position, ...]`` along ``dim``: that axis goes away."""
        src = self.shape(name)
        dim = self.axis(dim, len(src))
        if sizes.is_symbolic(src[dim]):  # the frontend checked the bounds as it traced
            at = ex.const(position) if position >= 0 else sizes.size(src[dim] + position)
        elif not -src[dim] <= position < src[dim]:
            raise self.fail(f"index {position} is out of range for axis {dim} of size {src[dim]}")
        else:
            at = ex.const(position % src[dim])
        d = tensor_ir.output_vars(len(src) - 1)
        index = [*d[:dim], at, *d[dim:]]
        return self._view(name, index, src[:dim] + src[dim + 1:], "select")

    # --- elementwise ---------------------------------------------------------------

    def result_type(self, *operands: Operand) -> DType:
        """PyTorch's type promotion: tensors of rank > 0 lead, then 0-d tensors, then Python numbers."""
        ranked = [self.dtype(o) for o in operands if isinstance(o, str) and self.shape(o)]
        zero_d = [self.dtype(o) for o in operands if isinstance(o, str) and not self.shape(o)]
        found = result_type(ranked, zero_d, [o for o in operands if not isinstance(o, str)])
        if found is None:
            raise self.fail("an operation needs at least one operand")
        return found

    def cast(self, name: str, dtype: DType, *, role: str = "cast") -> str:
        if self.dtype(name) == dtype:
            return name
        return self.elementwise(ex.cast(Arg(0, self.dtype(name)), dtype), [name], role=role)

    def full(self, value: Scalar, shape: Sequence[int], dtype: DType, *, role: str = "full") -> str:
        return self.elementwise(ex.cast(ex.const(value), dtype), [], shape, role=role)

    def apply(self, opname: str, *operands: Operand, role: str | None = None) -> str:
        """Scalar op ``opname`` over tensors and Python numbers, with broadcasting and type promotion."""
        tensors = [o for o in operands if isinstance(o, str)]
        if not tensors:
            raise self.fail(f"{opname} needs at least one tensor operand")
        if opname == "where":
            compute = self.result_type(*operands[1:])
        elif opname in _LOGIC:
            compute = dtypes.bool_
        else:
            compute = self.result_type(*operands)
            if (opname in _MATH or opname == "div") and not compute.is_float:
                compute = dtypes.float32
        roles = _OPERAND_ROLES.get(len(operands), ("arg",) * len(operands))
        tensor_roles = [r for o, r in zip(operands, roles) if isinstance(o, str)]
        inputs = self.broadcast(*tensors, roles=tensor_roles)
        args, position = [], 0
        for k, o in enumerate(operands):
            target = dtypes.bool_ if opname == "where" and k == 0 else compute
            if isinstance(o, str):
                args.append(ex.cast(Arg(position, self.dtype(o)), target))
                position += 1
            else:
                args.append(ex.cast(ex.const(o), target))
        return self.elementwise(ex.op(opname, *args), inputs, role=role or opname)

    def unary(self, opname: str, name: str, *, role: str | None = None) -> str:
        return self.apply(opname, name, role=role)

    def binary(self, opname: str, a: Operand, b: Operand, *, role: str | None = None) -> str:
        return self.apply(opname, a, b, role=role)

    def where(self, cond: Operand, a: Operand, b: Operand, *, role: str | None = None) -> str:
        return self.apply("where", cond, a, b, role=role)

    # --- functions of coordinates -------------------------------------------------------

    def arange(self, start: Scalar, step: Scalar, size: sizes.Size, dtype: DType, *, role: str = "arange") -> str:
        """``start + k * step`` for k in [0, size): an Elementwise of its output coordinate. An integer
        ``start`` may be known only at run time (``s0``: positions after a cache's)."""
        k = Coord(0)
        if dtype.is_float:
            value = ex.op("add", ex.op("mul", ex.cast(k, compute_dtype(dtype)), float(step)), float(start))
        else:
            value = k * int(step) + (start if isinstance(start, Expr) else int(start))
        return self.elementwise(ex.cast(value, dtype), [], (size,), role=role)

    def concat(self, names: Sequence[str], dim: int) -> str:
        """``torch.cat``: each part read where it lands (an IndexMap), then picked by the coordinate along ``dim``."""
        names = [n for n in names if self.shape(n) != (0,)] or list(names[:1])
        first = self.shape(names[0])
        dim = self.axis(dim, len(first))
        for n in names:
            shape = self.shape(n)
            if len(shape) != len(first) or any(a != b for k, (a, b) in enumerate(zip(shape, first)) if k != dim):
                raise self.fail(f"cannot concatenate {names[0]} {shape_text(first)} and {n} {shape_text(shape)} "
                                f"along axis {dim}")
        dtype = self.result_type(*names)
        names = [n for n in names if not sizes.is_empty((self.shape(n)[dim],))] or names[:1]
        if len(names) == 1:
            return self.cast(names[0], dtype)
        total = sum(self.shape(n)[dim] for n in names)
        out = first[:dim] + (total,) + first[dim + 1:]
        d = tensor_ir.output_vars(len(out))
        parts, ends, offset = [], [], 0
        for n in names:
            size = self.shape(n)[dim]
            index = list(d)
            # (d - offset) mod size, from non-negative terms where the sizes are symbols
            shift = (size - offset % size) if sizes.is_symbolic((size, offset)) and offset != 0 else (-offset) % size
            index[dim] = (d[dim] + shift) % size
            parts.append(self.index_map(n, index, out, role="part"))
            offset += size
            ends.append(offset)
        fn = ex.cast(Arg(len(parts) - 1, self.dtype(parts[-1])), dtype)
        for k in range(len(parts) - 2, -1, -1):
            fn = ex.op("where", ex.op("lt", Coord(dim), ends[k]), ex.cast(Arg(k, self.dtype(parts[k])), dtype), fn)
        return self.elementwise(fn, parts, role="cat")

    def cumsum(self, name: str, dim: int, dtype: DType | None = None) -> str:
        """``torch.cumsum``: a sum over a triangular mask of coordinates; integers and bools add up as int64."""
        target = dtype or (self.dtype(name) if self.dtype(name).is_float else dtypes.int64)
        shape = self.shape(name)
        if not shape:
            return self.cast(name, target)
        dim = self.axis(dim, len(shape))
        pairs_shape = shape[:dim + 1] + (shape[dim],) + shape[dim + 1:]
        d = tensor_ir.output_vars(len(pairs_shape))
        pairs = self.index_map(name, [*d[:dim], d[dim + 1], *d[dim + 2:]], pairs_shape, role="pairs")
        acc = compute_dtype(target)
        earlier = ex.op("le", Coord(dim + 1), Coord(dim))
        fn = ex.op("where", earlier, ex.cast(Arg(0, self.dtype(pairs)), acc), ex.cast(ex.const(0), acc))
        total = self.reduction(self.elementwise(fn, [pairs], role="masked"), [dim + 1], "sum")
        return self.cast(total, target)

    # --- reductions ------------------------------------------------------------------

    def _axes(self, name: str, dims: int | Sequence[int] | None) -> list[int]:
        rank = len(self.shape(name))
        if rank == 0:
            return []
        if dims is None or (not isinstance(dims, int) and len(dims) == 0):
            return list(range(rank))
        dims = [dims] if isinstance(dims, int) else dims
        return sorted({self.axis(k, rank) for k in dims})

    def reduce(self, name: str, op: str, dims: int | Sequence[int] | None = None, keepdim: bool = False,
               *, role: str | None = None) -> str:
        """Reduce over ``dims`` (every axis when None or empty, as ATen reads ``dim=[]``)."""
        axes = self._axes(name, dims)
        if not axes:
            return name
        return self.reduction(name, axes, op, keepdim, role=role)

    def _accumulate(self, name: str, op: str, dims, keepdim: bool, dtype: DType | None) -> str:
        target = dtype or (self.dtype(name) if self.dtype(name).is_float else dtypes.int64)
        total = self.reduce(self.cast(name, compute_dtype(target), role="acc"), op, dims, keepdim)
        return self.cast(total, target)

    def sum(self, name: str, dims: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DType | None = None) -> str:
        """``torch.sum``: integers add up as int64, half floats in float32."""
        return self._accumulate(name, "sum", dims, keepdim, dtype)

    def prod(self, name: str, dims: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | None = None) -> str:
        return self._accumulate(name, "prod", dims, keepdim, dtype)

    def max(self, name: str, dims: int | Sequence[int] | None = None, keepdim: bool = False) -> str:
        return self.reduce(name, "max", dims, keepdim)

    def min(self, name: str, dims: int | Sequence[int] | None = None, keepdim: bool = False) -> str:
        return self.reduce(name, "min", dims, keepdim)

    def mean(self, name: str, dims: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | None = None) -> str:
        target = dtype or self.dtype(name)
        if not target.is_float:
            raise self.fail(f"mean needs a floating-point tensor, {name} is {target.name}; cast it first")
        shape = self.shape(name)
        count = sizes.numel([shape[a] for a in self._axes(name, dims)])
        total = self.sum(name, dims, keepdim, dtype=compute_dtype(target))
        divisor = count if sizes.is_symbolic(count) else float(count)  # a count known at run time, as a float
        return self.cast(self.binary("div", total, divisor, role="mean"), target)

    # --- contraction -------------------------------------------------------------------

    def matmul(self, a: str, b: str, *, rounded: bool = True) -> str:
        """``torch.matmul``: IndexMap (both sides to (..., M, K, N)) -> Elementwise(mul) -> Reduction(sum over K).

        Vectors drop the M or N axis; batch axes broadcast; half floats multiply and add up in float32.
        Without ``rounded`` the float32 sums come back as they are, for a caller that adds a
        bias first and rounds once, as cuBLAS's fused bias does.
        """
        sa, sb = self.shape(a), self.shape(b)
        if not sa or not sb:
            raise self.fail(f"matmul needs tensors of rank 1 or more, got {shape_text(sa)} and {shape_text(sb)}")
        m = () if len(sa) == 1 else (sa[-2],)
        n = () if len(sb) == 1 else (sb[-1],)
        k = sa[-1]
        k_other = sb[0] if len(sb) == 1 else sb[-2]
        batch = broadcast_shape(sa[:-2], sb[:-2])
        if k != k_other or batch is None:
            raise self.fail(f"cannot multiply matrices of shapes {shape_text(sa)} and {shape_text(sb)}")
        product = batch + m + (k,) + n
        d = tensor_ir.output_vars(len(product))
        k_axis = len(batch) + len(m)
        lhs_index = _batch_index(sa[:-2], batch) + tuple(d[len(batch):k_axis + 1])
        rhs_index = _batch_index(sb[:-2], batch) + tuple(d[k_axis:])
        lhs = self.index_map(a, lhs_index, product, role="lhs")
        rhs = self.index_map(b, rhs_index, product, role="rhs")
        result = self.result_type(a, b)
        acc = compute_dtype(result)
        fn = ex.op("mul", ex.cast(Arg(0, self.dtype(a)), acc), ex.cast(Arg(1, self.dtype(b)), acc))
        total = self.reduction(self.elementwise(fn, [lhs, rhs], role="mul"), [k_axis], "sum", role="sum")
        return self.cast(total, result) if rounded else total

    # --- the program -----------------------------------------------------------------------

    def program(self, outputs: Sequence[str]) -> tensor_ir.Program:
        """The verified program computing ``outputs``; ops that no output depends on are dropped."""
        live = set(outputs)
        kept = []
        for o in reversed(self.ops):
            if o.name in live:
                kept.append(o)
                live.update(tensor_ir.op_inputs(o))
        program = tensor_ir.Program(self.inputs, reversed(kept), outputs)
        tensor_ir.verify_program(program)
        return program


__all__ = ["TensorBuilder", "Operand", "Scalar", "broadcast_shape", "compute_dtype", "number_dtype"]


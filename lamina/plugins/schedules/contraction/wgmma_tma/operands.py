"""Which contractions ``products = wgmma_tma`` can run, and how the TMA sees each operand.

wgmma multiplies bf16 or fp16 operands exactly and sums in float32, which is what a
16-bit matmul's Loop IR says (``f32(x[i, r]) * f32(w[j, r])``): the summed value must be
that product of one operand along the rows (m) and one along the columns (n), both of the
same 16-bit type. The TMA copies 2-D boxes of a tensor whose rows lie a multiple of 16
bytes apart, and wgmma on 16-bit operands reads A K-major: contiguous along the reduction,
its rows (along m) some stride apart; B likewise, or N-major (``_n_major_view``): contiguous
along n, a row per step of k, as a row-major ``x @ W`` weight lies. Every other term of an
operand's offset (the batch variables' strides, a constant offset) must be whole rows, so that
one 2-D tensor map over the buffer's rows (``TmaView``) covers every batch; a batch's first row
may be any function of the batch variables (a grouped key head ``h // group``). A box's rows
past the operand's last row in a batch are the next batch's (or zeros past the buffer's
end): they reach only the outputs past the edge, which the epilogue does not store. A batch
variable that moves an operand along its rows (a split-K slice's start) moves the boxes'
first column instead, and the tensor map spans the whole rows that the slices share.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import dtypes, expr as ex, index, loop_ir
from lamina.core.ir import kernel_ir
from lamina.core.ir.kernel_ir import hopper_tma
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.schedules.contraction.recognise import Contraction, Operand

OPERAND_DTYPES = (dtypes.bfloat16, dtypes.float16)


@attrs.frozen
class TmaView:
    """``operand`` as ``rows`` rows of the reduction's ``columns`` elements, ``row_stride``
    elements apart from the start of its buffer: the row of its element at (side variable
    ``v``, batch ``b``) is ``first_row(b) + v``."""

    operand: Operand
    rows: int
    columns: int
    row_stride: int
    batch_rows: dict[str, int]
    """Rows per step of each batch variable."""
    constant_rows: int
    batch_columns: dict[str, int] = attrs.Factory(dict)
    """Columns per step of each batch variable that moves along the rows rather than across
    them: a split-K slice's start."""
    batch_terms: dict[ex.Expr, int] = attrs.Factory(dict)
    """Rows per unit of each other term of the batch variables alone (``h // group``)."""
    constant_columns: int = 0
    """Columns of each row before the operand's first (the queries' before the keys')."""
    layout: str = kernel_ir.K_MAJOR
    """``k_major``: a row per element of the side, along k; ``n_major`` (the n side only): a row
    per step of k, along n, as a row-major ``x @ W`` weight lies, which wgmma reads transposed."""
    batch_column_terms: dict[ex.Expr, int] = attrs.Factory(dict)
    """Columns per unit of each term of the batch variables that moves along the rows (an N-major
    operand's grouped heads side by side in a row, ``h // group``)."""

    def first_row(self, batch_env: dict[str, ex.Expr]) -> ex.Expr:
        """The row of the operand's first row in the batch whose variables ``batch_env`` gives."""
        row: ex.Expr = ex.const(self.constant_rows)
        for var, rows in self.batch_rows.items():
            row = row + batch_env[var] * rows
        for term, rows in self.batch_terms.items():
            row = row + ex.substitute(term, batch_env) * rows
        return row

    def first_column(self, batch_env: dict[str, ex.Expr]) -> ex.Expr:
        """The column of the reduction's start in the batch (its split-K slice's first column)."""
        column: ex.Expr = ex.const(self.constant_columns)
        for var, columns in self.batch_columns.items():
            column = column + batch_env[var] * columns
        for term, columns in self.batch_column_terms.items():
            column = column + ex.substitute(term, batch_env) * columns
        return column


def unwrapped(value: ex.Expr) -> ex.Expr:
    """A load under casts to a wider float type and multiplications by exactly 1.0 (PyTorch's
    attention with a scale of 1, T5's, multiplies each operand by it), as the load: both leave
    a 16-bit value as it is."""
    while isinstance(value, ex.Op):
        if value.op == "cast" and value.dtype.is_float and value.dtype.itemsize > value.args[0].dtype.itemsize \
                and value.args[0].dtype.is_float:
            value = value.args[0]
        elif value.op == "mul" and value.dtype.is_float and any(_is_one(a) for a in value.args):
            (value,) = [a for a in value.args if not _is_one(a)] or [value.args[0]]
        else:
            break
    return value


def _is_one(value: ex.Expr) -> bool:
    return isinstance(value, ex.Const) and value.value == 1.0


def factors(c: Contraction) -> tuple[Operand, Operand] | None:
    """The m-side and n-side operands, both bf16 or both fp16, whose float32 product is the
    summed value, or None where the value is anything else."""
    value = c.value
    if c.acc_dtype != dtypes.float32 or not (isinstance(value, ex.Op) and value.op == "mul"
                                             and value.dtype == dtypes.float32):
        return None
    by_load = {o.load: o for o in c.operands}
    found = [by_load.get(unwrapped(arg)) for arg in value.args]
    if any(o is None for o in found) or len(found) != 2:
        return None
    kinds = {o.load.dtype for o in found}
    if len(kinds) != 1 or kinds.pop() not in OPERAND_DTYPES:
        return None
    sides = {o.side: o for o in found}
    if set(sides) != {"m", "n"}:
        return None
    return sides["m"], sides["n"]


def view(c: Contraction, operand: Operand) -> TmaView | str:
    """How the TMA reads ``operand`` K-major, or why it cannot."""
    load = operand.load
    buffer = c.kernel.buffer(load.buffer).type
    itemsize = load.dtype.itemsize
    side_var = c.m if operand.side == "m" else c.n
    form = index.affine(index.linearize(load.index, buffer.shape))
    steps, terms = {}, {}
    for atom, coef in form.terms.items():
        if isinstance(atom, ex.Var):
            steps[atom.name] = coef
        elif ex.free_vars(atom) <= set(c.batch):
            terms[atom] = coef
        else:
            return f"{operand.text} is not read at an affine offset of the loop variables"
    k_step, row_stride = steps.pop(c.reduce_var, 0), steps.pop(side_var, 0)
    if k_step != 1 and row_stride == 1 and operand.side == "n":
        return _n_major_view(c, operand, form, steps, terms, k_step)
    if k_step != 1:
        return (f"{operand.text} is not contiguous along {c.reduce_var} (K-major), nor is it the columns' operand "
                f"contiguous along {side_var}: wgmma_tma reads A K-major and B K-major or N-major")
    batch_columns = {v: s for v, s in steps.items() if v in c.batch and s < row_stride}
    for v in batch_columns:
        del steps[v]
    constant_columns = form.constant % row_stride if row_stride else 0
    columns = c.reduce_extent + sum(s * (c.extents[v] - 1) for v, s in batch_columns.items())
    if c.slice_bound is not None:
        columns = min(columns, c.slice_bound.end)
    columns += constant_columns
    if row_stride < columns or (row_stride * itemsize) % hopper_tma.GLOBAL_ALIGNMENT:
        return (f"{operand.text}'s rows are {row_stride} elements ({row_stride * itemsize} bytes) apart: the TMA needs "
                f"rows at least {columns} elements and a multiple of {hopper_tma.GLOBAL_ALIGNMENT} bytes apart "
                f"(pad {c.reduce_var} to a multiple of {hopper_tma.GLOBAL_ALIGNMENT // itemsize})")
    if any(v not in c.batch or s % row_stride for v, s in steps.items()) \
            or any(s % row_stride for s in terms.values()):
        return f"{operand.text}'s batches do not start on whole rows of its buffer"
    numel = 1
    for extent in buffer.shape:
        numel *= extent
    rows = (numel - columns) // row_stride + 1
    return TmaView(operand, rows, columns, row_stride, {v: s // row_stride for v, s in steps.items()},
                   form.constant // row_stride, batch_columns, {t: s // row_stride for t, s in terms.items()},
                   constant_columns)


def _n_major_view(c: Contraction, operand: Operand, form: index.Affine, steps: dict[str, int],
                  terms: dict[ex.Expr, int], row_stride: int) -> TmaView | str:
    """``operand``, contiguous along n, as rows of n elements ``row_stride`` apart, one per step of k.

    Batches lie after each other (whole rows apart) or side by side in the rows (attention's values
    of several heads in one row of a projection's output, ``(h // group) * features`` columns in).
    A k-tile past the reduction's end reads rows past the operand's last: they must be past the
    tensor map's rows (zeros), which holds where the batches do not follow each other; where they
    do the reduction must be whole k-tiles."""
    itemsize = operand.load.dtype.itemsize
    constant_columns = form.constant % row_stride if row_stride else 0
    along_rows = {**{ex.Var(v): s for v, s in steps.items()}, **terms}
    column_terms = {t: s for t, s in along_rows.items() if s % row_stride and _largest(c, t) is not None}
    steps = {v: s for v, s in steps.items() if ex.Var(v) not in column_terms}
    terms = {t: s for t, s in terms.items() if t not in column_terms}
    columns = c.extents[c.n] + constant_columns + sum(s * _largest(c, t) for t, s in column_terms.items())
    if row_stride < columns or (row_stride * itemsize) % hopper_tma.GLOBAL_ALIGNMENT:
        return (f"{operand.text}'s rows along {c.reduce_var} are {row_stride} elements ({row_stride * itemsize} bytes) "
                f"apart: the TMA needs them at least {columns} elements and a multiple of "
                f"{hopper_tma.GLOBAL_ALIGNMENT} bytes apart")
    if any(v not in c.batch or s % row_stride for v, s in steps.items()) or any(s % row_stride for s in terms.values()):
        return f"{operand.text}'s batches do not start on whole rows of its buffer"
    batch_rows = {v: s // row_stride for v, s in steps.items()}
    constant_rows = form.constant // row_stride
    if batch_rows or terms:
        if c.reduce_extent % kernel_ir.SWIZZLE_PANEL:
            return (f"{operand.text} lies along n in batches of {c.reduce_extent} rows of k, which k-tiles of "
                    f"{kernel_ir.SWIZZLE_PANEL} would run past into the next batch's")
        numel = 1
        for extent in c.kernel.buffer(operand.load.buffer).type.shape:
            numel *= extent
        rows = (numel - columns) // row_stride + 1
    else:
        rows = constant_rows + c.reduce_extent
    return TmaView(operand, rows, columns, row_stride, batch_rows, constant_rows, {},
                   {t: s // row_stride for t, s in terms.items()}, constant_columns, kernel_ir.N_MAJOR, column_terms)


def _largest(c: Contraction, term: ex.Expr) -> int | None:
    """The largest value of a batch variable, or of a term ``v // g`` of one (the last group of
    heads), over the batch; None for a term of another form."""
    if isinstance(term, ex.Var) and term.name in c.batch:
        return c.extents[term.name] - 1
    if isinstance(term, ex.Op) and term.op == "floordiv" and isinstance(term.args[0], ex.Var) \
            and isinstance(term.args[1], ex.Const) and term.args[0].name in c.extents and term.args[1].value > 0:
        return (c.extents[term.args[0].name] - 1) // term.args[1].value
    return None


def padded_shape(type: TensorType) -> TensorType:
    """``type`` with its last axis rounded up to a whole number of 16-byte steps."""
    step = hopper_tma.GLOBAL_ALIGNMENT // type.dtype.itemsize
    *outer, last = type.shape
    return TensorType((*outer, -(-last // step) * step), type.dtype)


def with_buffer_in_kernel(kernel: loop_ir.Kernel, buffer: loop_ir.Buffer) -> loop_ir.Kernel:
    """``kernel`` with the buffer of ``buffer``'s name, among its inputs and outputs, declared as ``buffer``;
    the same object where it holds no such buffer (caches of what a kernel reads and costs are
    kept per kernel, and an equal copy would have to be compared with the original in full)."""
    if not any(b.name == buffer.name for b in kernel.inputs + kernel.outputs):
        return kernel

    def swap(buffers: tuple[loop_ir.Buffer, ...]) -> tuple[loop_ir.Buffer, ...]:
        return tuple(buffer if b.name == buffer.name else b for b in buffers)

    return attrs.evolve(kernel, inputs=swap(kernel.inputs), outputs=swap(kernel.outputs))


def with_buffer(program: loop_ir.Program, buffer: loop_ir.Buffer) -> loop_ir.Program:
    """``program`` with the temporary of ``buffer``'s name declared as ``buffer`` everywhere."""
    return attrs.evolve(
        program,
        temporaries=tuple(buffer if b.name == buffer.name else b for b in program.temporaries),
        kernels=tuple(with_buffer_in_kernel(k, buffer) for k in program.kernels))

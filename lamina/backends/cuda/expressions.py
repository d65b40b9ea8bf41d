"""Kernel IR expressions as CUDA C++ expressions.

The printer knows the C type of every subexpression, because C++ overloads on it:
integer ``max(int, long long)`` is ambiguous, ``__half + float`` too, and ``int / int``
truncates where the IR means a float division. Operands are converted explicitly
wherever C++'s implicit conversions would do something else than the IR says, and
nowhere else, so that the text stays readable. Parentheses follow C++ precedence.

C++ computes on ``signed char``, ``unsigned char`` and ``short`` in ``int``: an
arithmetic result of those types is converted back at once (``static_cast<unsigned
char>(a + b)``), so that it wraps around where PyTorch's does, between two ops fused
into one expression as much as at a store. A float becomes one of them through an
``int`` (``long long`` for ``unsigned char``, as PyTorch converts), which wraps, where a
direct conversion would saturate on the GPU.

Floating-point ``max`` and ``min`` are ``torch.maximum`` and ``torch.minimum``: a NaN operand
gives NaN. CUDA's ``fmaxf`` and ``fminf`` return the other operand instead (relu(NaN) would
be 0), so they print as ``lamina_max`` and ``lamina_min`` (``nan_propagating_extreme``), one
``max.NaN``/``min.NaN`` instruction on float and a compare-select on double; half types
compute them in float, as every other function.

An element of an array in the 128-byte swizzle (``Array.swizzle``) is where
``lamina_swizzled_N`` (N its bytes) moves its row-major offset in the array, which is
declared flat: every access of an array element goes through ``ExpressionPrinter.element``.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, index
from lamina.core.ir.dtypes import DType
from lamina.core.ir.expr import OPS, Const, Expr, Op, Var
from lamina.core.ir.kernel_ir import Array, ClusterLoad, Load, PackedPair, ShuffleXor, Special, Tf32

PRIMARY, UNARY, MUL, ADD, RELATION, EQUALITY, AND, OR = 100, 90, 80, 70, 60, 55, 40, 35

_INFIX = {
    "add": ("+", ADD), "sub": ("-", ADD), "mul": ("*", MUL), "div": ("/", MUL),
    "floordiv": ("/", MUL), "mod": ("%", MUL),
    "lt": ("<", RELATION), "le": ("<=", RELATION), "gt": (">", RELATION), "ge": (">=", RELATION),
    "eq": ("==", EQUALITY), "ne": ("!=", EQUALITY), "and": ("&&", AND), "or": ("||", OR),
}
_FLOAT_FUNCTIONS = {
    "exp": "exp", "exp2": "exp2", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "sin": "sin",
    "cos": "cos", "erf": "erf", "abs": "fabs", "pow": "pow",
    "floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "rint", "fmod": "fmod",
}
_INTEGER_INFIX = {"truncdiv": "/", "fmod": "%"}
"""Data division of integers of any sign: C's ``/`` and ``%`` truncate, which is what these ops mean."""

HALF_TYPES = (dtypes.float16, dtypes.bfloat16)
NARROW_INTEGERS = (dtypes.int16, dtypes.int8, dtypes.uint8)
"""Integer types that C++ promotes to ``int`` before computing on them."""
_MAY_LEAVE_RANGE = frozenset({"add", "sub", "mul", "neg", "abs", "pow", "truncdiv"})
"""Integer ops whose result may lie outside the range of their operands' type."""
INT_LIMIT = 2**31

Printed = tuple[str, int]


def c_type(dtype: DType) -> str:
    return dtype.c_type


def is_integer(dtype: DType) -> bool:
    return not dtype.is_float


def _wraps(e: Op) -> bool:
    """Whether ``e`` is printed converted back to its narrow integer type."""
    return e.dtype in NARROW_INTEGERS and e.op in _MAY_LEAVE_RANGE


def _holds(source: DType, target: DType) -> bool:
    """Whether every value of integer type ``source`` is one of ``target``."""
    low, high = dtypes.integer_range(source)
    target_low, target_high = dtypes.integer_range(target)
    return target_low <= low and high <= target_high


class ExpressionPrinter:
    """Prints the expressions of one kernel.

    ``names`` maps Kernel IR names to C++ identifiers; ``var_types`` and
    ``array_types`` give the C type of every variable and array element;
    ``index_type`` is what index arithmetic (``threadIdx.x``) is computed in;
    ``swizzled`` holds the arrays in the 128-byte swizzle, by name.
    """

    def __init__(self, kernel_name: str, index_type: str, names: Callable[[str], str],
                 var_types: Mapping[str, str], array_types: Mapping[str, DType],
                 swizzled: Mapping[str, Array] | None = None):
        self.kernel_name = kernel_name
        self.index_type = index_type
        self.names = names
        self.var_types = var_types
        self.array_types = array_types
        self.swizzled = swizzled or {}
        self.non_finite_used = False
        self.cluster_loads_used = False
        self.tf32_used = False
        self.exp2_used = False
        self.pairs_used: set[DType] = set()
        """The 16-bit types of the ``PackedPair`` printed: each needs its ``lamina_bf16x2`` or ``lamina_f16x2``."""
        self.extremes_used: set[tuple[str, str]] = set()
        """The ``lamina_max``/``lamina_min`` the kernel calls, as (C type, max or min)."""
        self.swizzled_sizes: set[int] = set()
        """The element sizes of the swizzled arrays accessed: each needs its ``lamina_swizzled_N``."""

    # --- public ---------------------------------------------------------------

    def text(self, e: Expr) -> str:
        return self._print(e)[0]

    def element(self, array: str, at: tuple[Expr, ...]) -> str:
        """``array[i][j]``, the element at ``at``; of a swizzled array, the flat element where it is stored."""
        swizzled = self.swizzled.get(array)
        if swizzled is None:
            return self.names(array) + "".join(f"[{self.text(i)}]" for i in at)
        size = swizzled.dtype.itemsize
        self.swizzled_sizes.add(size)
        offset = self.text(index.linearize(at, swizzled.shape))
        return f"{self.names(array)}[lamina_swizzled_{size}({offset})]"

    def converted(self, e: Expr, dtype: DType) -> str:
        """``e`` as a value of ``dtype``, for an assignment or a store."""
        return self._convert(e, dtype)[0]

    def c_type_of(self, e: Expr) -> str:
        """The C++ type of ``e`` as printed."""
        if isinstance(e, Const):
            if e.dtype.is_float or e.dtype == dtypes.bool_:
                return c_type(e.dtype)
            return "int" if -INT_LIMIT <= int(e.value) < INT_LIMIT else "long long"
        if isinstance(e, Var):
            return self.var_types.get(e.name, self.index_type if e.dtype == dtypes.index else c_type(e.dtype))
        if isinstance(e, Special):
            return self.index_type
        if isinstance(e, Load):
            return c_type(self.array_types[e.array])
        if isinstance(e, (ShuffleXor, ClusterLoad, Tf32, PackedPair)):
            return c_type(e.dtype)
        if isinstance(e, Op):
            kind = OPS[e.op].kind
            if kind in ("compare", "logic"):
                return "bool"
            if kind == "cast" or e.dtype.is_float or _wraps(e):
                return c_type(e.dtype)
            operands = e.args[1:] if e.op == "where" else e.args
            return "long long" if any(self.c_type_of(a) == "long long" for a in operands) else "int"
        raise VerificationError(f"Kernel IR kernel {self.kernel_name} holds an expression the CUDA printer does not know: {e!r}")

    # --- printing ---------------------------------------------------------------

    def _wrap(self, printed: Printed, min_prec: int) -> str:
        text, prec = printed
        return f"({text})" if prec < min_prec else text

    def _operand(self, e: Expr, dtype: DType, min_prec: int) -> str:
        return self._wrap(self._convert(e, dtype), min_prec)

    def _print(self, e: Expr) -> Printed:
        if isinstance(e, Const):
            return self._const(e)
        if isinstance(e, Var):
            return self.names(e.name), PRIMARY
        if isinstance(e, Special):
            return f"({self.index_type}){e.kind}.{e.axis}", UNARY
        if isinstance(e, Load):
            return self.element(e.array, e.index), PRIMARY
        if isinstance(e, Op):
            return self._op(e)
        if isinstance(e, ShuffleXor):
            return self._shuffle_xor(e)
        if isinstance(e, ClusterLoad):
            self.cluster_loads_used = True
            return f"lamina_cluster_load(&{self.element(e.array, e.index)}, {self.text(e.rank)})", PRIMARY
        if isinstance(e, Tf32):
            self.tf32_used = True
            return f"lamina_tf32({self.text(e.value)})", PRIMARY
        if isinstance(e, PackedPair):
            self.pairs_used.add(e.pair_dtype)
            return f"lamina_{e.pair_dtype.short}x2({self.text(e.low)}, {self.text(e.high)})", PRIMARY
        raise VerificationError(f"Kernel IR kernel {self.kernel_name} holds an expression the CUDA printer does not know: {e!r}")

    def _shuffle_xor(self, e: ShuffleXor) -> Printed:
        """Half-precision values travel as float: the accumulators that schedules shuffle are
        float anyway, and the float overload is the one every architecture has."""
        value = self.text(e.value)
        if e.dtype in HALF_TYPES:
            shuffled = f"__shfl_xor_sync(0xffffffffu, static_cast<float>({value}), {e.lane_mask})"
            return f"static_cast<{c_type(e.dtype)}>({shuffled})", PRIMARY
        return f"__shfl_xor_sync(0xffffffffu, {value}, {e.lane_mask})", PRIMARY

    def _const(self, c: Const) -> Printed:
        v, dtype = c.value, c.dtype
        if dtype == dtypes.bool_:
            return ("true" if v else "false"), PRIMARY
        if not dtype.is_float:
            text = str(int(v))
            return text, (UNARY if int(v) < 0 else PRIMARY)
        value = float(v)
        if math.isfinite(value):
            text = repr(value) + ("" if dtype == dtypes.float64 else "f")
            printed = (text, UNARY if text.startswith("-") else PRIMARY)
        else:
            self.non_finite_used = True
            text = "NAN" if math.isnan(value) else ("INFINITY" if value > 0 else "-INFINITY")
            printed = (text, UNARY if text.startswith("-") else PRIMARY)
            if dtype != dtypes.float32:
                printed = (f"static_cast<{c_type(dtype)}>({text})", PRIMARY)
        if dtype in HALF_TYPES:
            return f"static_cast<{c_type(dtype)}>({printed[0]})", PRIMARY
        return printed

    def _convert(self, e: Expr, dtype: DType) -> Printed:
        """``e`` converted to ``dtype`` where C++ would not convert it the IR's way by itself."""
        source = e.dtype
        if source == dtype:
            return self._print(e)
        if is_integer(source) and is_integer(dtype) and (dtype not in NARROW_INTEGERS or _holds(source, dtype)):
            return self._print(e)
        return self._cast(e, dtype)

    def _cast(self, e: Expr, dtype: DType) -> Printed:
        source = e.dtype
        target = c_type(dtype)
        if self.c_type_of(e) == target:
            return self._print(e)
        if isinstance(e, Const) and (dtype.is_float or math.isfinite(float(e.value))):
            if target == "long long":
                value = int(e.value)
                return f"{value}LL", PRIMARY if value >= 0 else UNARY
            return self._const(ex.cast(e, dtype))
        inner = self.text(e)
        through_float = (source in HALF_TYPES or dtype in HALF_TYPES) and dtypes.float32 not in (source, dtype)
        if through_float:
            inner = f"static_cast<float>({inner})"
        if source.is_float and dtype in NARROW_INTEGERS:
            inner = f"static_cast<{'int' if dtype.is_signed else 'long long'}>({inner})"
        return f"static_cast<{target}>({inner})", PRIMARY

    def _infix(self, name: str, a: str, b: str, prec: int) -> Printed:
        return f"{a} {_INFIX[name][0]} {b}", prec

    def _op(self, e: Op) -> Printed:
        printed = self._computed(e)
        if _wraps(e):
            return f"static_cast<{c_type(e.dtype)}>({printed[0]})", PRIMARY
        return printed

    def _computed(self, e: Op) -> Printed:
        """``e`` as C++ computes it, in ``int`` for narrow integer types."""
        name, args, dtype = e.op, e.args, e.dtype
        if name in ("floordiv", "mod"):
            prec = MUL
            return self._infix(name, self._wrap(self._print(args[0]), prec), self._wrap(self._print(args[1]), prec + 1), prec)
        if name in ("add", "sub", "mul", "div"):
            prec = _INFIX[name][1]
            return self._infix(name, self._operand(args[0], dtype, prec), self._operand(args[1], dtype, prec + 1), prec)
        if name in _INTEGER_INFIX and is_integer(dtype):
            lhs, rhs = self._operand(args[0], dtype, MUL), self._operand(args[1], dtype, MUL + 1)
            return f"{lhs} {_INTEGER_INFIX[name]} {rhs}", MUL
        if name in ("lt", "le", "gt", "ge", "eq", "ne"):
            # Comparisons never chain unparenthesised: ``(a < b) == p``.
            common = dtypes.promote(args[0].dtype, args[1].dtype)
            operands = (self._operand(a, common, RELATION + 1) for a in args)
            return self._infix(name, *operands, _INFIX[name][1])
        if name in ("and", "or"):
            # ``a && b || c`` is correct C++, but people (and compilers' warnings) want the parentheses.
            operands = (self._wrap(self._print(a), AND + 1) for a in args)
            return self._infix(name, *operands, _INFIX[name][1])
        if name == "not":
            return "!" + self._wrap(self._print(args[0]), UNARY), UNARY
        if name == "neg":
            return _negate(self._operand(args[0], dtype, UNARY)), UNARY
        if name == "where":
            cond = self._wrap(self._print(args[0]), OR)
            a, b = (self._operand(x, dtype, OR) for x in args[1:])
            if dtype in HALF_TYPES:
                # Two lvalues of a class type make the conditional an lvalue, whose address
                # puts register arrays on the stack; copies of them do not.
                a, b = (f"{c_type(dtype)}({x})" for x in (a, b))
            return f"({cond} ? {a} : {b})", PRIMARY
        if name == "cast":
            return self._cast(args[0], dtype)
        return self._function(e)

    def _function(self, e: Op) -> Printed:
        name, args, dtype = e.op, e.args, e.dtype
        if is_integer(dtype):
            return self._integer_function(e)
        compute = dtypes.float32 if dtype in HALF_TYPES else dtype
        suffix = "f" if compute == dtypes.float32 else ""
        one = "1.0" + suffix
        if name == "sigmoid":
            x = self._operand(args[0], compute, UNARY)
            printed = (f"{one} / ({one} + exp{suffix}({_negate(x)}))", MUL)
        elif name == "reciprocal":
            printed = (f"{one} / {self._operand(args[0], compute, MUL + 1)}", MUL)
        elif name == "truncdiv":
            # The quotient rounded as IEEE division rounds it: ``--prec-div=false`` makes ``/`` approximate,
            # and an exact quotient of 3 that comes out 2.9999998 would truncate to 2.
            a, b = (self._operand(x, compute, 0) for x in args)
            quotient = f"__fdiv_rn({a}, {b})" if compute == dtypes.float32 else f"{a} / {b}"
            printed = (f"trunc{suffix}({quotient})", PRIMARY)
        elif name == "exp2" and compute == dtypes.float32:
            self.exp2_used = True
            printed = (f"lamina_exp2({self._operand(args[0], compute, 0)})", PRIMARY)
        elif name in ("max", "min"):
            self.extremes_used.add((c_type(compute), name))
            operands = ", ".join(self._operand(a, compute, 0) for a in args)
            printed = (f"lamina_{name}({operands})", PRIMARY)
        elif name == "pow" and isinstance(args[1], Const) and float(args[1].value) in (2.0, 3.0):
            # A square or a cube (norms, GPT-2's tanh GELU) as products, as PyTorch's CUDA kernel computes
            # them: powf's general path is slow and takes a stack frame (the cube took four fifths of the
            # time of GPT-2's MLP product, whose epilogue computes it).
            x = self._operand(args[0], compute, MUL + 1)
            printed = (" * ".join([x] * int(args[1].value)), MUL)
        else:
            operands = ", ".join(self._operand(a, compute, 0) for a in args)
            printed = (f"{_FLOAT_FUNCTIONS[name]}{suffix}({operands})", PRIMARY)
        if compute != dtype:
            return f"static_cast<{c_type(dtype)}>({printed[0]})", PRIMARY
        return printed

    def _integer_function(self, e: Op) -> Printed:
        name, args, dtype = e.op, e.args, e.dtype
        if name in ("max", "min"):
            common = "long long" if any(self.c_type_of(a) == "long long" for a in args) else "int"
            operands = ", ".join(self._integer_operand(a, common) for a in args)
            return f"{name}({operands})", PRIMARY
        if name == "abs":
            return f"abs({self.text(args[0])})", PRIMARY
        if name == "pow":
            operands = ", ".join(f"static_cast<double>({self.text(a)})" for a in args)
            # A narrow result goes through long long, which wraps where a direct conversion saturates.
            result = "long long" if dtype in NARROW_INTEGERS else c_type(dtype)
            return f"static_cast<{result}>(pow({operands}))", PRIMARY
        raise VerificationError(
            f"Kernel IR kernel {self.kernel_name} applies {name} to {dtype.name} values; "
            "the CUDA backend computes it on floating-point values only"
        )

    def _integer_operand(self, e: Expr, common: str) -> str:
        if self.c_type_of(e) == common:
            return self.text(e)
        if isinstance(e, Const):
            return f"{int(e.value)}LL" if common == "long long" else str(int(e.value))
        return f"static_cast<{common}>({self.text(e)})"


_EXTREME_COMPARISONS = {"max": ">", "min": "<"}


EXP2_HELPER = """\
// 2 ** x by the hardware's approximation, within 2 ulp, results below 2^-126 flushed to zero (ex2.approx.ftz.f32):
// one instruction where exp2f adds the steps of subnormal results, as FlashAttention's softmax takes it.
__device__ __forceinline__ float lamina_exp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}"""


def nan_propagating_extreme(c_type: str, name: str) -> str:
    """The definition of ``lamina_max`` or ``lamina_min`` (``name``) on ``c_type`` (float, double):
    ``torch.maximum``/``torch.minimum``, NaN if either operand is NaN; on float one ``max.NaN``/``min.NaN``
    instruction (sm_80 and later, as ``cp.async`` and the tf32 mma), on double a compare-select."""
    if c_type == "float":
        return (f"__device__ __forceinline__ float lamina_{name}(float a, float b) {{\n"
                f"  float r;\n"
                f'  asm("{name}.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));\n'
                f"  return r;\n"
                f"}}")
    return (f"__device__ __forceinline__ double lamina_{name}(double a, double b) "
            f"{{ return a {_EXTREME_COMPARISONS[name]} b || a != a ? a : b; }}")


def _negate(text: str) -> str:
    """``-x``, parenthesising an operand that starts with a minus (``--`` is a decrement)."""
    return f"-({text})" if text.startswith("-") else f"-{text}"

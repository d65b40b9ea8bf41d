"""Division modes, remainders, rounding and the small integer types (int8, uint8, int16).

Results are compared with eager PyTorch bit for bit: integers wrap around, floor
division and remainders round as PyTorch's kernels do for every sign, and the CUDA
source of each new scalar op and dtype compiles with NVRTC.
"""

import pytest
import torch

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, expr as ex
from lamina.core.ir.type_promotion import result_type
from lamina.plugins.ops import division, plugin
from lamina.testing import Capabilities, OpPluginSuite
from lamina.testing.capabilities import ALL_DTYPES
from lamina.testing.cases.integer_ops import NUMBER_DTYPES, SMALL_INTEGERS


def torch_dtype(dtype: dtypes.DType) -> torch.dtype:
    return getattr(torch, dtype.name)


def lamina_dtype(dtype: torch.dtype) -> dtypes.DType:
    return dtypes.BY_NAME[str(dtype).removeprefix("torch.")]


def assert_identical(got: torch.Tensor, want: torch.Tensor) -> None:
    """Same dtype, same values (NaN where PyTorch has NaN), same signs of zero."""
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if want.dtype.is_floating_point:
        numbers = ~torch.isnan(want)
        assert torch.equal(torch.signbit(got[numbers]), torch.signbit(want[numbers]))


def run_exactly_as_eager(fn, *inputs):
    """``fn`` compiled and run on the Kernel IR simulator, checked against eager; the compiled function."""
    compiled = lamina.compile(fn, inputs)
    got, want = compiled(*inputs), fn(*inputs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_identical(g, w)
    return compiled


def full_range(shape, dtype: torch.dtype) -> torch.Tensor:
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max + 1, shape, dtype=dtype)


# --- type promotion -------------------------------------------------------------------------

@pytest.mark.parametrize("a", dtypes.ALL, ids=str)
@pytest.mark.parametrize("b", dtypes.ALL, ids=str)
def test_promotion_of_two_tensors_is_torchs(a, b):
    x, y = torch.ones(2, dtype=torch_dtype(a)), torch.ones(2, dtype=torch_dtype(b))
    assert dtypes.promote(a, b) == lamina_dtype(torch.result_type(x, y))


@pytest.mark.parametrize("a", dtypes.ALL, ids=str)
def test_promotion_with_zero_d_tensors_and_python_numbers_is_torchs(a):
    x = torch.ones(2, dtype=torch_dtype(a))
    for b in dtypes.ALL:
        zero_d = torch.ones((), dtype=torch_dtype(b))
        assert result_type([a], [b], []) == lamina_dtype(torch.result_type(x, zero_d)), (a, b)
    for number in (True, 3, -1, 2.5):
        assert result_type([a], [], [number]) == lamina_dtype(torch.result_type(x, number)), (a, number)


def test_the_small_integer_types_promote_as_pytorch_says():
    assert dtypes.promote(dtypes.int8, dtypes.uint8) == dtypes.int16
    assert dtypes.promote(dtypes.uint8, dtypes.int16) == dtypes.int16
    assert dtypes.promote(dtypes.bool_, dtypes.uint8) == dtypes.uint8
    assert dtypes.promote(dtypes.uint8, dtypes.float16) == dtypes.float16
    assert result_type([dtypes.uint8], [], [300]) == dtypes.uint8


def test_constants_of_a_small_integer_type_wrap_around():
    assert ex.cast(ex.const(300), dtypes.uint8).value == 44
    assert ex.cast(ex.const(-1), dtypes.uint8).value == 255
    assert ex.cast(ex.const(200), dtypes.int8).value == -56
    assert ex.cast(ex.const(300.7, dtypes.float32), dtypes.uint8).value == 44


# --- the conformance cases, compiled in every dtype -----------------------------------------

class TestDivisionOpsCompiledInEveryDtype(OpPluginSuite):
    """lamina's own suite compiles float32 only; these ops' compiled cases run on the simulator in every dtype."""

    plugin = plugin
    capabilities = Capabilities(dtypes=ALL_DTYPES)
    ops = tuple(division.DECOMPOSITIONS)
    compiled_dtypes = NUMBER_DTYPES


class TestSmallIntegersCompiled(OpPluginSuite):
    """Arithmetic, comparisons, selection, reductions, casts and views compiled in int16, int8 and uint8."""

    plugin = plugin
    capabilities = Capabilities(dtypes=ALL_DTYPES)
    ops = ("aten.add.Tensor", "aten.sub.Scalar", "aten.mul.Tensor", "aten.neg.default", "aten.abs.default",
           "aten.maximum.default", "aten.lt.Tensor", "aten.eq.Scalar", "aten.where.self", "aten.sum.dim_IntList",
           "aten.amax.default", "aten.amin.default", "aten.prod.default", "aten._to_copy.default",
           "aten.view.default", "aten.transpose.int", "aten.cat.default")
    compiled_dtypes = SMALL_INTEGERS


# --- wrap-around through fused kernels --------------------------------------------------------

OVERFLOWING = {
    "u8_add_then_mul": (torch.uint8, lambda a, b, c: (a + b) * c),
    "i8_mul_then_sub": (torch.int8, lambda a, b, c: a * 3 - b * c),
    "i16_mul_then_add": (torch.int16, lambda a, b, c: a * b + c),
    "u8_negation": (torch.uint8, lambda a, b, c: -(a + b) * 2),
    "i8_abs_of_the_minimum": (torch.int8, lambda a, b, c: torch.abs(a - b) + c),
    "u8_number_out_of_range": (torch.uint8, lambda a, b, c: (a + 300) * 2 - c),
    "u8_compared_with_a_wrapped_number": (torch.uint8, lambda a, b, c: torch.where(a + b > -1, b, c * 2)),
    "i8_where_of_wrapped_sums": (torch.int8, lambda a, b, c: torch.where(a + b > c, a * b, c - a)),
    "i8_sum_of_wrapped_products": (torch.int8, lambda a, b, c: (a * b).sum(dim=1)),
    "u8_max_of_wrapped_sums": (torch.uint8, lambda a, b, c: (a + b).amax(dim=1)),
    "i8_min_of_wrapped_differences": (torch.int8, lambda a, b, c: (a - b).amin(dim=0)),
    "u8_floor_division_of_a_wrapped_sum": (torch.uint8, lambda a, b, c: (a + b) // (c // 2 + 1) * 3),
    "i8_remainder_of_a_wrapped_product": (torch.int8, lambda a, b, c: (a * b) % torch.where(c == 0, 7, c)),
    "u8_through_float_and_back": (torch.uint8, lambda a, b, c: ((a + b).float() * 1.5).to(torch.uint8) + c),
    "i16_to_i8": (torch.int16, lambda a, b, c: (a * b // 7).to(torch.int8) * 2),
}


@pytest.mark.parametrize("name", list(OVERFLOWING))
def test_fused_small_integer_arithmetic_wraps_as_in_eager(name):
    dtype, fn = OVERFLOWING[name]
    inputs = [full_range((17, 33), dtype) for _ in range(3)]
    run_exactly_as_eager(fn, *inputs)
    wide, want = fn(*(x.long() for x in inputs)), fn(*inputs)
    assert (wide != want.long()).any(), "the program must overflow, or it checks nothing"


def test_an_add_wraps_before_the_multiply_fused_with_it():
    a, b, c = (full_range((64,), torch.uint8) for _ in range(3))
    compiled = run_exactly_as_eager(lambda a, b, c: (a + b) * c, a, b, c)
    assert compiled.kernel_count == 1
    assert "static_cast<unsigned char>(static_cast<unsigned char>(" in compiled.ir("cuda")


# --- division and rounding for every sign -----------------------------------------------------

DIVIDENDS = [7, -7, 7, -7, 6, -6, 0, 1, -1, 5]
DIVISORS = [2, 2, -2, -2, -3, 3, 5, -5, 5, 5]


def divisions(a, b):
    return (a // b, torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"),
            a % b, torch.fmod(a, b))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8], ids=str)
def test_integer_division_rounds_as_torch_for_every_sign(dtype):
    a, b = torch.tensor(DIVIDENDS, dtype=dtype), torch.tensor(DIVISORS, dtype=dtype)
    run_exactly_as_eager(divisions, a, b)
    floor, trunc, _, remainder, fmod = divisions(a, b)
    assert floor.tolist() == [3, -4, -4, 3, -2, -2, 0, -1, -1, 1]
    assert trunc.tolist() == [3, -3, -3, 3, -2, -2, 0, 0, 0, 1]
    assert remainder.tolist() == [1, 1, -1, -1, 0, 0, 0, -4, 4, 0]
    assert fmod.tolist() == [1, -1, 1, -1, 0, 0, 0, 1, -1, 0]


def test_int8_division_of_the_minimum_by_minus_one_wraps():
    a, b = torch.tensor([-128, -128, 127], dtype=torch.int8), torch.tensor([-1, 3, -1], dtype=torch.int8)
    run_exactly_as_eager(divisions, a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_float_division_rounds_as_torch_for_every_sign(dtype):
    a = torch.tensor([*DIVIDENDS, 0.0, -0.0, 5.5, -5.5, 1e-3, 1.0], dtype=dtype)
    b = torch.tensor([*DIVISORS, -3.0, 3.0, 0.5, 0.25, -7.0, 0.1], dtype=dtype)
    run_exactly_as_eager(divisions, a, b)


def test_float_floor_division_is_not_the_floor_of_the_quotient():
    """1 / 0.1 rounds to 10 in float32, but 0.1 is a little more than a tenth: PyTorch says 9."""
    a, b = torch.tensor([1.0, -1.0]), torch.tensor([0.1, 0.1])
    run_exactly_as_eager(lambda a, b: (a // b, a % b), a, b)
    assert (a // b).tolist() == [9.0, -10.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_quotients_round_where_aten_rounds_them(dtype):
    """ATen divides by one number in float32, as given, but by a tensor in steps rounded to half
    precision; a remainder rounds its divisor to half precision either way."""
    a = (torch.linspace(1, 3, 40) * 7).to(dtype)
    for x in (0.057382022461520646, 1.7501502739252381, 0.1):
        run_exactly_as_eager(lambda a, t: (a // x, torch.div(a, x, rounding_mode="trunc"), a % x, a // t,
                                           torch.div(a, t, rounding_mode="trunc"), a % t, a // t[0]),
                             a, torch.full((40,), x).to(dtype))


def test_float_division_by_zero_gives_ieee_values():
    a, b = torch.tensor([7.0, -7.0, 0.0, 7.0]), torch.tensor([0.0, 0.0, 0.0, -0.0])
    run_exactly_as_eager(divisions, a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rounding_takes_ties_to_even(dtype):
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.7, 3.7, -0.2], dtype=dtype)
    run_exactly_as_eager(lambda x: (torch.round(x), torch.floor(x), torch.ceil(x), torch.trunc(x)), x)
    assert torch.round(x)[:7].tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 4.0]


def test_rounding_an_integer_tensor_gives_it_back():
    x = full_range((5, 7), torch.int8)
    run_exactly_as_eager(lambda x: (torch.round(x), torch.floor(x) * 2), x)


def test_integer_division_by_a_tensor_holding_zero_raises_on_the_simulator():
    a, b = torch.randint(-5, 6, (4, 5)), torch.randint(1, 6, (4, 5))
    compiled = lamina.compile(lambda a, b: a % b, (a, b))
    b[1, 2] = 0
    with pytest.raises(LaminaError, match="integer division by zero"):
        compiled(a, b)


def test_integer_division_by_the_number_zero_is_refused_when_compiling():
    with pytest.raises(LaminaError, match="ZeroDivisionError"):
        lamina.compile(lambda a: a // 0, (torch.randint(-5, 6, (4, 5)),))


@pytest.mark.parametrize("fn", [torch.floor, lambda m: torch.remainder(m, m)], ids=["floor", "remainder"])
def test_bool_tensors_are_refused_as_pytorch_refuses_them(fn):
    with pytest.raises(LaminaError, match="not defined for bool tensors"):
        lamina.compile(fn, (torch.rand(4, 5) < 0.5,))


# --- the CUDA source compiles ------------------------------------------------------------------

def every_new_op_and_dtype(x, y, h, bf, d, i8, u8, i16):
    return (torch.floor(x), torch.ceil(h), torch.trunc(bf), torch.round(d), torch.fmod(x, y),
            torch.div(x, y, rounding_mode="trunc"), torch.div(d, d + 4, rounding_mode="floor"), h % h.abs().add(1),
            torch.div(i8, torch.where(i8 == 0, 3, i8), rounding_mode="trunc"), (u8 + 250) % (u8 // 2 + 1),
            i16 // -3, torch.fmod(i16 * 300, 7), (u8.to(torch.float16) * 2).to(torch.int8), bf.to(torch.uint8),
            (u8 + i8).amax(dim=0), (i8 * i8).sum(dim=0))


def test_every_new_scalar_op_and_dtype_compiles_with_nvrtc_for_sm_90():
    inputs = (torch.randn(64), torch.randn(64), torch.randn(64).half(), torch.randn(64).bfloat16(),
              torch.randn(64).double(), full_range((64,), torch.int8), full_range((64,), torch.uint8),
              full_range((64,), torch.int16))
    compiled = run_exactly_as_eager(every_new_op_and_dtype, *inputs)
    source = compiled.ir("cuda")
    for spelling in ("floorf(", "ceilf(", "truncf(", "rint(", "fmodf(", "__fdiv_rn(", "floor(",
                     "signed char", "unsigned char", "short"):
        assert spelling in source, spelling
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, kernel_arch(kernel, "sm_90"))
        assert result.registers > 0
        assert (result.spill_stores, result.spill_loads) == (0, 0), kernel.name

"""Kernel IR -> CUDA C++: the printed text, and that NVRTC accepts it."""

from __future__ import annotations

import math

import pytest

from lamina.backends.cuda import assert_no_spills, compile_kernel, emit_cuda, kernel_symbol, launch_shared_bytes
from lamina.backends.cuda.codegen import index_type, shared_layout, uses_dynamic_shared
from lamina.backends.cuda.expressions import ExpressionPrinter
from lamina.backends.cuda.headers import include_dirs
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir
from lamina.core.ir.expr import Const, Var, const, op
from tests.backends.cuda import kernels

F32, F64, I64 = dtypes.float32, dtypes.float64, dtypes.int64

TILED_MATMUL = r'''// kernel tiled_matmul: grid (2, 3, 1), block (8, 8, 1)

__device__ __forceinline__ void lamina_cp_async_4(void* dst, const void* src, bool in_bounds) {
  const unsigned dst_shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst_shared), "l"(src), "r"(in_bounds ? 4 : 0) : "memory");
}

extern "C" __global__ void __launch_bounds__(64) tiled_matmul(const float* __restrict__ a, const float* __restrict__ b, const int* __restrict__ bias, float* __restrict__ c) {
  __shared__ float As[16][17];
  __shared__ float Bs[16][17];
  float acc[2][2];
  // each thread owns a 2x2 tile of c
  int row0 = (int)blockIdx.y * 16 + (int)threadIdx.y * 2;
  int col0 = (int)blockIdx.x * 16 + (int)threadIdx.x * 2;
  int t = (int)threadIdx.y * 8 + (int)threadIdx.x;
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      acc[i][j] = 0.0f;
    }
  }
  for (int k0 = 0; k0 < 45; k0 += 16) {
    #pragma unroll
    for (int e = 0; e < 4; ++e) {
      {
        const bool lamina_in_bounds = (int)blockIdx.y * 16 + e * 4 + t / 16 < 37 && k0 + t % 16 < 45;
        lamina_cp_async_4(&As[e * 4 + t / 16][t % 16], lamina_in_bounds ? &a[(int)blockIdx.y * 720 + t / 16 * 45 + k0 + t % 16] + (e * 180) : a, lamina_in_bounds);
      }
      {
        const bool lamina_in_bounds = k0 + e * 4 + t / 16 < 45 && (int)blockIdx.x * 16 + t % 16 < 29;
        lamina_cp_async_4(&Bs[e * 4 + t / 16][t % 16], lamina_in_bounds ? &b[k0 * 29 + t / 16 * 29 + (int)blockIdx.x * 16 + t % 16] + (e * 116) : b, lamina_in_bounds);
      }
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();
    #pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      #pragma unroll
      for (int i = 0; i < 2; ++i) {
        #pragma unroll
        for (int j = 0; j < 2; ++j) {
          acc[i][j] = acc[i][j] + As[(int)threadIdx.y * 2 + i][kk] * Bs[kk][(int)threadIdx.x * 2 + j];
        }
      }
    }
    __syncthreads();
  }
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    #pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (row0 + i < 37 && col0 + j < 29) {
        c[row0 * 29 + i * 29 + col0 + j] = acc[i][j] + static_cast<float>(bias[col0 + j]);
      }
    }
  }
}
'''


def test_tiled_matmul_prints_as_expected():
    assert emit_cuda(kernels.tiled_matmul(37, 29, 45)) == TILED_MATMUL


def test_tiled_matmul_compiles_for_sm90_without_spills(tmp_path):
    kernel = kernels.tiled_matmul(37, 29, 45)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90", cache_dir=tmp_path)
    assert compiled.registers > 0
    assert compiled.shared_bytes == kernel.shared_bytes
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert_no_spills(compiled)
    assert compiled.cubin[:4] == b"\x7fELF"


def test_float32_kernels_include_no_headers():
    assert "#include" not in emit_cuda(kernels.elementwise(100))


@pytest.mark.parametrize("dtype, header, other", [
    (dtypes.bfloat16, "cuda_bf16.h", "cuda_fp16.h"),
    (dtypes.float16, "cuda_fp16.h", "cuda_bf16.h"),
])
def test_half_precision_kernels_include_their_header(dtype, header, other):
    source = emit_cuda(kernels.elementwise(100, dtype=dtype))
    assert f"#include <{header}>" in source
    assert other not in source


@pytest.mark.skipif(include_dirs(("cuda_bf16.h", "cuda_fp16.h")) is None, reason="no CUDA headers for half precision")
@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
def test_half_precision_kernels_compile(tmp_path, dtype):
    kernel = kernels.elementwise(100, dtype=dtype)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), cache_dir=tmp_path)
    assert compiled.registers > 0 and not compiled.spills


@pytest.mark.skipif(include_dirs(("cuda_bf16.h",)) is None, reason="no CUDA headers for half precision")
def test_a_half_precision_select_between_register_elements_keeps_them_off_the_stack(tmp_path):
    """``c ? a : b`` of two bfloat16 lvalues is an lvalue whose address spills the vector
    registers it picks from to the stack; the printer selects between copies instead."""
    import torch

    import lamina

    x, y = torch.randn(4, 64).bfloat16(), torch.randn(4, 64).bfloat16()
    program = lamina.Compiler(target="sm_90").compile(lambda x, y: torch.where(x > 0, x, y) * 2, (x, y))
    (kernel,) = program.compilation.kernels.kernels
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), cache_dir=tmp_path)
    assert "__nv_bfloat16(x_vector[0][0])" in emit_cuda(kernel)
    assert compiled.stack_bytes == 0 and not compiled.spills


def test_more_than_48_kib_of_shared_memory_is_carved_from_dynamic_shared_memory(tmp_path):
    kernel = kir.Kernel(
        name="big_tiles",
        params=[kir.Param("x", F32, 64), kir.Param("y", F32, 64, writable=True)],
        arrays=[kir.Array("As", F32, (4, 64, 65), "shared"), kir.Array("Bs", dtypes.float16, (3,), "shared"),
                kir.Array("Cs", F32, (16, 64), "shared")],
        body=[
            kir.Store("As", (const(1), const(2), kir.thread_idx()), kir.Load("x", (kir.thread_idx(),), F32)),
            kir.Store("Cs", (const(0), kir.thread_idx()), const(2.0)),
            kir.Barrier(),
            kir.Store("y", (kir.thread_idx(),), op("add", kir.Load("As", (const(1), const(2), 63 - kir.thread_idx()), F32),
                                                    kir.Load("Cs", (const(0), kir.thread_idx()), F32))),
        ],
        launch=kir.Launch((1, 1, 1), (64, 1, 1)),
    )
    assert uses_dynamic_shared(kernel)
    assert [offset for _, offset in shared_layout(kernel)] == [0, 66560, 66576]
    assert launch_shared_bytes(kernel) == 66576 + 16 * 64 * 4
    source = emit_cuda(kernel)
    assert "extern __shared__ __align__(16) unsigned char lamina_smem[];" in source
    assert "float (*As)[64][65] = reinterpret_cast<float (*)[64][65]>(lamina_smem + 0);" in source
    assert "__half* Bs = reinterpret_cast<__half*>(lamina_smem + 66560);" in source
    assert "__shared__ float" not in source
    assert "dynamic shared memory 70672 B" in source.splitlines()[0]
    compiled = compile_kernel(source, kernel_symbol(kernel), cache_dir=tmp_path)
    assert compiled.shared_bytes == 0 and not compiled.spills


def test_up_to_48_kib_of_shared_memory_is_static():
    kernel = kernels.reverse_blocks(blocks=2, per_block=12 * 1024)
    source = emit_cuda(kernel)
    assert "  __shared__ float stage[12288];" in source
    assert launch_shared_bytes(kernel) == 0


def test_huge_buffers_use_64_bit_index_arithmetic(tmp_path):
    kernel = kernels.elementwise(2**31 + 5)
    assert index_type(kernel) == "long long"
    source = emit_cuda(kernel)
    assert "long long i = (long long)blockIdx.x * 128 + (long long)threadIdx.x;" in source
    assert "if (i < 2147483653) {" in source
    assert not compile_kernel(source, kernel_symbol(kernel), cache_dir=tmp_path).spills


def test_int64_data_variables_stay_64_bit():
    i = Var("i")
    kernel = kir.Kernel(
        name="sum_int64",
        params=[kir.Param("x", I64, 10), kir.Param("y", I64, 1, writable=True)],
        arrays=[],
        body=[
            kir.Declare("total", I64, const(0)),
            kir.Declare("count", I64, const(0)),
            kir.For("i", const(0), const(10), 1, [
                kir.Assign("total", op("add", Var("total"), kir.Load("x", (i,), I64))),
                kir.Assign("count", Var("count") + 1),
            ]),
            kir.Store("y", (const(0),), op("max", Var("total"), Var("count"))),
        ],
        launch=kir.Launch((1, 1, 1), (1, 1, 1)),
    )
    source = emit_cuda(kernel)
    assert "  long long total = 0;" in source
    assert "  int count = 0;" in source
    assert "y[0] = max(total, static_cast<long long>(count));" in source


def test_statements_print_as_cuda():
    i, x = Var("i"), kir.Load("x", (Var("i"),), F32)
    kernel = kir.Kernel(
        name="statements",
        params=[kir.Param("x", F32, 8), kir.Param("y", F32, 8, writable=True)],
        arrays=[],
        body=[
            kir.Comment("two lines\nof comment"),
            kir.For("i", const(7), const(-1), -2, [
                kir.If(op("gt", x, 1.0), [kir.Store("y", (i,), const(1.0))],
                       [kir.If(op("lt", x, -1.0), [kir.Store("y", (i,), const(-1.0))],
                               [kir.Store("y", (i,), x)])]),
            ]),
        ],
        launch=kir.Launch((1, 1, 1), (1, 1, 1)),
    )
    body = emit_cuda(kernel).split("{\n", 1)[1]
    assert body == (
        "  // two lines\n"
        "  // of comment\n"
        "  for (int i = 7; i > -1; i -= 2) {\n"
        "    if (x[i] > 1.0f) {\n"
        "      y[i] = 1.0f;\n"
        "    } else if (x[i] < -1.0f) {\n"
        "      y[i] = -1.0f;\n"
        "    } else {\n"
        "      y[i] = x[i];\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def test_names_that_collide_with_cuda_get_an_underscore(tmp_path):
    kernel = kernels.elementwise(100, name="exp")
    kernel = kir.Kernel(kernel.name, [kir.Param("float" if p.name == "w" else p.name, p.dtype, p.numel, p.writable)
                                      for p in kernel.params], [], _rename_loads(kernel.body, "w", "float"), kernel.launch)
    source = emit_cuda(kernel)
    assert kernel_symbol(kernel) == "exp_"
    assert "void __launch_bounds__(128) exp_(" in source
    assert "const float* __restrict__ float_," in source
    assert "expf(-fabsf(float_[i]))" in source
    assert compile_kernel(source, kernel_symbol(kernel), cache_dir=tmp_path).registers > 0


def _rename_loads(body, old, new):
    def rename(e):
        return kir.Load(new, e.index, e.dtype) if isinstance(e, kir.Load) and e.array == old else None

    out = []
    for s in body:
        if isinstance(s, kir.If):
            out.append(kir.If(ex.transform(s.cond, rename), _rename_loads(s.then, old, new)))
        elif isinstance(s, kir.Store):
            out.append(kir.Store(s.array, s.index, ex.transform(s.value, rename)))
        else:
            out.append(s)
    return out


def test_a_name_that_is_not_an_identifier_is_reported():
    kernel = kernels.elementwise(100)
    kernel = kir.Kernel(kernel.name, [*kernel.params[:2], kir.Param("y.out", F32, 100, True)], [],
                        [kernel.body[0], kir.Store("y.out", (Var("i"),), const(1.0))], kernel.launch)
    with pytest.raises(VerificationError, match=r"'y\.out', which is not a C identifier"):
        emit_cuda(kernel)


# --- expressions -------------------------------------------------------------------

ARRAYS = {"x": F32, "d": F64, "h": dtypes.float16, "b": dtypes.bfloat16, "n": I64, "k": dtypes.int32}
a, b, c = Var("a", F32), Var("b", F32), Var("c", F32)
i, j = Var("i"), Var("j")
p, q, r = Var("p", dtypes.bool_), Var("q", dtypes.bool_), Var("r", dtypes.bool_)
u = Var("u", F64)


def printed(e, index="int") -> str:
    types = {"a": "float", "b": "float", "c": "float", "u": "double", "p": "bool", "q": "bool", "r": "bool"}
    return ExpressionPrinter("test", index, lambda name: name, types, ARRAYS).text(e)


@pytest.mark.parametrize("e, text", [
    (op("mul", op("add", a, b), c), "(a + b) * c"),
    (op("add", op("mul", a, b), c), "a * b + c"),
    (op("sub", a, op("sub", b, c)), "a - (b - c)"),
    (op("sub", op("sub", a, b), c), "a - b - c"),
    (op("div", a, op("mul", b, c)), "a / (b * c)"),
    (op("neg", op("neg", a)), "-(-a)"),
    (op("neg", Const(-1.5, F32)), "-(-1.5f)"),
    (op("mul", a, Const(-2.0, F32)), "a * -2.0f"),
    (op("neg", op("add", a, b)), "-(a + b)"),
    (Const(1.0, F32), "1.0f"),
    (Const(1e-5, F32), "1e-05f"),
    (Const(math.inf, F32), "INFINITY"),
    (Const(-math.inf, F32), "-INFINITY"),
    (Const(math.nan, F32), "NAN"),
    (Const(2.5, F64), "2.5"),
    (Const(-math.inf, F64), "static_cast<double>(-INFINITY)"),
    (Const(True, dtypes.bool_), "true"),
    (const(3_000_000_000), "3000000000"),
    (op("exp", a), "expf(a)"), (op("log", a), "logf(a)"), (op("sqrt", a), "sqrtf(a)"),
    (op("rsqrt", a), "rsqrtf(a)"), (op("tanh", a), "tanhf(a)"), (op("sin", a), "sinf(a)"),
    (op("cos", a), "cosf(a)"), (op("erf", a), "erff(a)"), (op("abs", a), "fabsf(a)"),
    (op("max", a, b), "lamina_max(a, b)"), (op("min", a, b), "lamina_min(a, b)"), (op("pow", a, b), "powf(a, b)"),
    (op("pow", a, Const(2.0, F32)), "a * a"), (op("pow", op("add", a, b), Const(3.0, F32)), "(a + b) * (a + b) * (a + b)"),
    (op("pow", a, Const(2.5, F32)), "powf(a, 2.5f)"),
    (op("exp", u), "exp(u)"), (op("max", u, Const(0.0, F64)), "lamina_max(u, 0.0)"), (op("rsqrt", u), "rsqrt(u)"),
    (op("sigmoid", a), "1.0f / (1.0f + expf(-a))"),
    (op("sigmoid", op("neg", a)), "1.0f / (1.0f + expf(-(-a)))"),
    (op("sigmoid", u), "1.0 / (1.0 + exp(-u))"),
    (op("reciprocal", op("add", a, b)), "1.0f / (a + b)"),
    (op("mul", op("reciprocal", a), b), "1.0f / a * b"),
    (op("mul", b, op("reciprocal", a)), "b * (1.0f / a)"),
    (op("exp", i), "expf(static_cast<float>(i))"),
    (op("div", i, j), "static_cast<float>(i) / static_cast<float>(j)"),
    (op("floordiv", op("add", i, 1), 4), "(i + 1) / 4"),
    (op("mod", op("mul", i, 4), j), "i * 4 % j"),
    (op("mul", op("mod", i, 4), 2), "i % 4 * 2"),
    (op("mul", 2, op("mod", i, 4)), "2 * (i % 4)"),
    (op("where", op("gt", a, 0.0), a, b), "(a > 0.0f ? a : b)"),
    (op("add", op("where", p, a, b), c), "(p ? a : b) + c"),
    (op("where", p, a, i), "(p ? a : static_cast<float>(i))"),
    (ex.cast(a, dtypes.int32), "static_cast<int>(a)"),
    (ex.cast(i, F32), "static_cast<float>(i)"),
    (ex.cast(Var("a", F32), I64), "static_cast<long long>(a)"),
    (ex.cast(op("add", a, b), F64), "static_cast<double>(a + b)"),
    (op("lt", a, op("add", b, c)), "a < b + c"),
    (op("lt", i, a), "static_cast<float>(i) < a"),
    (op("eq", op("lt", a, b), p), "(a < b) == p"),
    (op("or", op("and", p, q), op("not", r)), "(p && q) || !r"),
    (op("and", op("or", p, q), r), "(p || q) && r"),
    (op("and", op("lt", i, 4), op("ge", j, 0)), "i < 4 && j >= 0"),
    (op("not", op("lt", a, b)), "!(a < b)"),
    (op("max", i, 0), "max(i, 0)"),
    (op("max", i, kir.Load("n", (const(0),), I64)), "max(static_cast<long long>(i), n[0])"),
    (op("min", kir.Load("n", (const(0),), I64), 7), "min(n[0], 7LL)"),
    (op("abs", kir.Load("k", (i,), dtypes.int32)), "abs(k[i])"),
    (op("exp", kir.Load("h", (i,), dtypes.float16)), "static_cast<__half>(expf(static_cast<float>(h[i])))"),
    (op("add", kir.Load("b", (i,), dtypes.bfloat16), a), "static_cast<float>(b[i]) + a"),
    (ex.cast(kir.Load("b", (i,), dtypes.bfloat16), dtypes.float16), "static_cast<__half>(static_cast<float>(b[i]))"),
    (ex.cast(Const(1.5, F32), dtypes.bfloat16), "static_cast<__nv_bfloat16>(1.5f)"),
    (kir.thread_idx("y") * 4 + kir.block_idx("x"), "(int)threadIdx.y * 4 + (int)blockIdx.x"),
    (op("mul", kir.Load("x", (i * 8 + j,), F32), kir.Load("d", (i,), F64)), "static_cast<double>(x[i * 8 + j]) * d[i]"),
])
def test_expression_prints_as_cuda(e, text):
    assert printed(e) == text


def test_special_registers_follow_the_index_type():
    assert printed(kir.thread_idx() + 1, index="long long") == "(long long)threadIdx.x + 1"
    assert printed(op("max", Var("i"), 3), index="long long") == "max(i, 3LL)"

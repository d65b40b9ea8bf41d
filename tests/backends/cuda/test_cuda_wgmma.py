"""Hopper's warpgroup mma and swizzled shared arrays as CUDA: the printed PTX, sm_90a, and on the GPU equal to the simulator."""

from __future__ import annotations

import re

import attrs
import pytest
import torch

from lamina.backends.cuda import (CudaBackend, LaunchableKernel, compile_kernel, device_arch, emit_cuda, kernel_symbol,
                                  launch_shared_bytes)
from lamina.backends.cuda.codegen import shared_layout, uses_dynamic_shared
from lamina.backends.cuda.wgmma import kernel_arch, swizzled_helper
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const
from tests.backends.cuda import kernels
from tests.backends.wgmma_kernels import buffers, operands, sixteen_bit_product_from_registers, warpgroup_product

F32 = dtypes.float32


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is visible")(test))


def swizzled_staging(rows: int = 512) -> kir.Kernel:
    """``y = x`` through a swizzled (rows, 32) f32 array behind a small one: copied in by 16-byte cp.async,
    read back by vector loads and single loads."""
    chunk = Var("chunk")
    row, column = chunk // 8, chunk % 8 * 4
    steps = rows * 8 // 256

    def each_chunk(body):
        return kir.For("i", const(0), const(steps), 1, [kir.Declare("chunk", dtypes.index, kir.thread_idx() + Var("i") * 256),
                                                        *body], unroll=True)

    return kir.Kernel(
        name="swizzled_staging",
        params=[kir.Param("x", F32, rows * 32), kir.Param("y", F32, rows * 32, writable=True)],
        arrays=[kir.Array("flags", F32, (3,), "shared"), kir.Array("tile", F32, (rows, 32), "shared", swizzle=128),
                kir.Array("v", F32, (4,), "register")],
        body=[
            each_chunk([kir.CpAsync("tile", (row, column), "x", (chunk * 4,), bytes=16)]),
            kir.CpAsyncCommit(), kir.CpAsyncWait(0), kir.Barrier(),
            each_chunk([kir.VectorLoad("v", (const(0),), "tile", (row, column), 4),
                        kir.Store("v", (const(1),), kir.Load("tile", (row, column + 1), F32)),
                        kir.VectorStore("y", (chunk * 4,), "v", (const(0),), 4)]),
        ],
        launch=kir.Launch((1, 1, 1), (256, 1, 1)),
    )


def behind_a_large_array(kernel: kir.Kernel) -> kir.Kernel:
    """``kernel`` with an unused 48 KiB + 48 B shared array first: its arrays move to dynamic shared memory, the
    swizzled ones at the next 1024-byte boundaries."""
    return attrs.evolve(kernel, arrays=[kir.Array("large", F32, (12300,), "shared"), *kernel.arrays])


# --- the printed source -----------------------------------------------------------

def test_a_warpgroup_product_is_wgmma_between_its_fences_on_swizzled_arrays(tmp_path):
    kernel = warpgroup_product(2, 32, 16)
    source = emit_cuda(kernel)
    assert "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {" in source
    assert source.count("__device__ __forceinline__ void lamina_wgmma_tf32_n32(") == 1
    assert "lamina_wgmma_tf32_n128" not in source
    assert "((address & 0x3FFFF) >> 4) | (1ull << 16)" in source
    assert "| (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);" in source
    assert "  __shared__ __align__(1024) float a_tile[4096];" in source
    assert "      a_tile[lamina_swizzled_4(e / 16 * 32 + e % 16)] = a[e];" in source
    assert "  return e ^ (((e >> 5) & 7) << 2);" in source
    body = source.split("__syncthreads();", 1)[1]
    order = ['asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");',
             "lamina_wgmma_tf32_n32(&a_tile[group * 2048], &b_tile[0], 1,\n      acc[0], acc[1],",
             "lamina_wgmma_tf32_n32(&a_tile[group * 2048 + 8], &b_tile[8], 1,",
             'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");',
             'asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");',
             "d[group * 2048 + warp * 512 + g * 32 + t * 2] = acc[0];"]
    assert [body.index(text) for text in order] == sorted(body.index(text) for text in order)
    assert source.index('asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");') < source.index("__syncthreads();")
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert compiled.shared_bytes == kernel.shared_bytes
    assert "serialized" not in compiled.log


@pytest.mark.parametrize("n", [8, 128, 256])
def test_every_width_of_wgmma_compiles_without_spills(tmp_path, n):
    kernel = warpgroup_product(1, n, 8)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert "serialized" not in compiled.log


@pytest.mark.parametrize("n", [64, 128])
def test_a_from_registers_is_passed_as_four_32_bit_registers_and_compiles_unserialized(tmp_path, n):
    kernel = warpgroup_product(2, n, 32, a_from_registers=True)
    source = emit_cuda(kernel)
    assert source.count(f"__device__ __forceinline__ void lamina_wgmma_tf32_rs_n{n}(float a0, float a1, float a2, "
                        "float a3, const float* b, int accumulate,") == 1
    assert f"lamina_wgmma_tf32_n{n}(" not in source
    assert f"}}, {{%{n // 2}, %{n // 2 + 1}, %{n // 2 + 2}, %{n // 2 + 3}}}, %{n // 2 + 4}, p, 1, 1;" in source
    assert '"r"(__float_as_uint(a0)), "r"(__float_as_uint(a1))' in source
    assert (f"lamina_wgmma_tf32_rs_n{n}(a_values[1][0], a_values[1][1], a_values[1][2], a_values[1][3], &b_tile[8], 1,"
            in source)
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert "serialized" not in compiled.log


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
def test_sixteen_bit_a_from_registers_is_four_packed_words_and_compiles_unserialized(tmp_path, dtype):
    kernel = sixteen_bit_product_from_registers(dtype, 2, 128, 64)
    source = emit_cuda(kernel)
    kind = dtype.short
    assert source.count(f"__device__ __forceinline__ void lamina_wgmma_{kind}_rs_n128(int a0, int a1, int a2, int a3, "
                        f"const {dtype.c_type}* b, int accumulate,") == 1
    assert "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;" in source
    assert f"a_words[0] = lamina_{kind}x2(a[" in source
    assert f"lamina_wgmma_{kind}_rs_n128(a_words[4], a_words[5], a_words[6], a_words[7], &b_tile[16], 1," in source
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert "serialized" not in compiled.log


def test_without_accumulate_the_first_step_replaces_the_accumulators():
    source = emit_cuda(warpgroup_product(1, 32, 16, accumulate=False))
    assert "lamina_wgmma_tf32_n32(&a_tile[group * 2048], &b_tile[0], 0," in source
    assert "lamina_wgmma_tf32_n32(&a_tile[group * 2048 + 8], &b_tile[8], 1," in source


@pytest.mark.parametrize("dtype", [F32, dtypes.bfloat16, dtypes.float64])
def test_the_printed_swizzle_places_every_element_where_kernel_ir_says(dtype):
    """The helper's expression is Python as well as C++: evaluated here, it moves every element of
    16 rows where ``swizzled_offset`` does."""
    array = kir.Array("tile", dtype, (16, kir.SWIZZLE_BYTES // dtype.itemsize), "shared", swizzle=kir.SWIZZLE_BYTES)
    expression = re.search(r"return (.*);", swizzled_helper(dtype.itemsize, "int")).group(1)
    place = eval(f"lambda e: {expression}")
    elements = range(16 * array.shape[1])
    assert [place(e) for e in elements] == [kir.swizzled_offset(array, e) for e in elements]


def test_kernels_without_swizzle_or_wgmma_print_no_helpers_for_them():
    source = emit_cuda(kernels.tiled_matmul(37, 29, 45))
    assert "lamina_swizzled" not in source and "wgmma" not in source and "__align__(1024)" not in source


# --- dynamic shared memory ---------------------------------------------------------

def test_a_swizzled_array_in_dynamic_shared_memory_starts_1024_byte_aligned(tmp_path):
    kernel = swizzled_staging()
    assert uses_dynamic_shared(kernel)
    assert [offset for _, offset in shared_layout(kernel)] == [0, 1024]
    assert launch_shared_bytes(kernel) == 1024 + 512 * 128
    source = emit_cuda(kernel)
    assert "  extern __shared__ __align__(1024) unsigned char lamina_smem[];" in source
    assert "  float* tile = reinterpret_cast<float*>(lamina_smem + 1024);" in source
    assert "lamina_cp_async_16(&tile[lamina_swizzled_4(chunk * 4)], &x[chunk * 4], true);" in source
    assert "*reinterpret_cast<const uint4*>(&tile[lamina_swizzled_4(chunk * 4)]);" in source
    assert "v[1] = tile[lamina_swizzled_4(chunk * 4 + 1)];" in source
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90", cache_dir=tmp_path)
    assert compiled.shared_bytes == 0 and not compiled.spills


def shared_arrays(*arrays: kir.Array) -> kir.Kernel:
    return kir.Kernel("arrays", [], arrays, [], kir.Launch((1, 1, 1), (32, 1, 1)))


def test_the_gap_before_a_swizzled_array_counts_toward_the_static_limit():
    kernel = shared_arrays(kir.Array("flags", F32, (200,), "shared"),
                           kir.Array("tile", F32, (376, 32), "shared", swizzle=128))
    assert kernel.shared_bytes <= 48 * 1024
    assert uses_dynamic_shared(kernel)
    assert [offset for _, offset in shared_layout(kernel)] == [0, 1024]


def test_arrays_behind_a_swizzled_one_keep_16_byte_alignment():
    kernel = shared_arrays(kir.Array("tile", F32, (8, 32), "shared", swizzle=128), kir.Array("rest", F32, (5,), "shared"),
                           kir.Array("more", F32, (3,), "shared"))
    assert [offset for _, offset in shared_layout(kernel)] == [0, 1024, 1056]


# --- architectures -------------------------------------------------------------------

def test_the_backend_compiles_wgmma_kernels_for_sm_90a_and_the_others_for_the_target(tmp_path):
    program = kir.Program([warpgroup_product(1, 32, 8), kernels.elementwise(100)])
    compiled = CudaBackend(cache_dir=tmp_path).compile(program, "sm_90")
    assert {name: kernel.arch for name, kernel in compiled.items()} == {"wgmma": "sm_90a", "elementwise": "sm_90"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
def test_a_wgmma_kernel_for_another_architecture_is_refused_with_what_to_do(tmp_path, arch):
    program = kir.Program([warpgroup_product(1, 32, 8)])
    with pytest.raises(LaminaError, match=rf"kernel wgmma runs Hopper's warpgroup mma .* Hopper GPUs \(sm_90\) .* "
                                          rf"cannot be compiled for {arch}; pin contraction.products"):
        CudaBackend(cache_dir=tmp_path).compile(program, arch)


def test_kernel_arch_leaves_other_kernels_and_sm_90a_as_they_are():
    assert kernel_arch(kernels.elementwise(100), "sm_80") == "sm_80"
    assert kernel_arch(warpgroup_product(1, 32, 8), "sm_90a") == "sm_90a"


# --- on the GPU ------------------------------------------------------------------------

def on_the_gpu(kernel: kir.Kernel, arrays: dict[str, torch.Tensor], output: str, tmp_path) -> torch.Tensor:
    arch = kernel_arch(kernel, device_arch())
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), arch, cache_dir=tmp_path)
    on_device = {name: t.cuda() for name, t in arrays.items()}
    LaunchableKernel(kernel, compiled)(on_device)
    return on_device[output].cpu()


def assert_the_gpu_computes_what_the_simulator_computes(kernel, warpgroups, n, k, accumulate, tmp_path):
    """Within 1e-6 of the terms summed, ``|a| @ |b|^T + |c|``: the simulator rounds each wgmma's sum once, and the
    tensor cores add in an order and precision of their own (on the H200, 1.9e-6 apart on an element of 3e-3 whose
    terms summed to about 10). Reading the operands as tf32 takes the result about 1e-3 of its terms away from the
    exact product, far beyond that."""
    torch.manual_seed(0)
    a, b, c = operands(warpgroups, n, k)
    simulated = buffers(a, b, c)
    simulate(kernel, simulated)
    computed = on_the_gpu(kernel, buffers(a, b, c), "d", tmp_path)
    scale = (a.abs().double() @ b.abs().double().T + (c.abs().double() if accumulate else 0)).flatten()
    apart = (computed.double() - simulated["d"].double()).abs() / scale
    assert not computed.isnan().any()
    assert apart.max() <= 1e-6, f"element {int(apart.argmax())} is {float(apart.max()):.2g} of its terms apart"
    exact = (a.double() @ b.double().T + (c.double() if accumulate else 0)).flatten().float()
    assert not torch.allclose(computed, exact, rtol=1e-6, atol=1e-6)


@gpu
@pytest.mark.parametrize("warpgroups, n, k, accumulate", [
    (1, 32, 16, True), (2, 32, 32, True), (1, 128, 32, True), (2, 128, 16, True), (2, 32, 16, False), (2, 128, 32, False),
])
def test_the_gpu_multiplies_what_the_simulator_multiplies(tmp_path, warpgroups, n, k, accumulate):
    kernel = warpgroup_product(warpgroups, n, k, accumulate=accumulate)
    assert_the_gpu_computes_what_the_simulator_computes(kernel, warpgroups, n, k, accumulate, tmp_path)


@gpu
@pytest.mark.parametrize("warpgroups, n, k", [(1, 32, 16), (2, 128, 32)])
def test_with_a_from_registers_the_gpu_multiplies_what_the_simulator_multiplies(tmp_path, warpgroups, n, k):
    kernel = warpgroup_product(warpgroups, n, k, a_from_registers=True)
    assert_the_gpu_computes_what_the_simulator_computes(kernel, warpgroups, n, k, True, tmp_path)


@gpu
@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float16])
def test_sixteen_bit_a_from_registers_the_gpu_multiplies_what_the_simulator_multiplies(tmp_path, dtype):
    kernel = sixteen_bit_product_from_registers(dtype, 2, 128, 64)
    torch.manual_seed(0)
    a, b = torch.randn(128, 64), torch.randn(128, 64).to({dtypes.bfloat16: torch.bfloat16,
                                                           dtypes.float16: torch.float16}[dtype])
    arrays = {"a": a.flatten(), "b": b.flatten(), "d": torch.full((128 * 128,), float("nan"))}
    simulated = {name: t.clone() for name, t in arrays.items()}
    simulate(kernel, simulated)
    computed = on_the_gpu(kernel, arrays, "d", tmp_path)
    scale = (a.abs().double() @ b.abs().double().T).flatten()
    apart = (computed.double() - simulated["d"].double()).abs() / scale
    assert apart.max() <= 1e-6, f"element {int(apart.argmax())} is {float(apart.max()):.2g} of its terms apart"


@gpu
def test_wgmma_on_arrays_in_dynamic_shared_memory_reads_them_swizzled(tmp_path):
    kernel = behind_a_large_array(warpgroup_product(2, 128, 32))
    assert uses_dynamic_shared(kernel)
    assert_the_gpu_computes_what_the_simulator_computes(kernel, 2, 128, 32, True, tmp_path)


@gpu
def test_a_swizzled_array_in_dynamic_shared_memory_gives_back_what_was_copied_in(tmp_path):
    x = torch.randn(512 * 32)
    y = on_the_gpu(swizzled_staging(), {"x": x, "y": torch.full_like(x, float("nan"))}, "y", tmp_path)
    assert torch.equal(y, x)

"""Hopper's TMA copies, mbarriers and bf16 / fp16 wgmma as CUDA: the printed PTX, tensor maps as
parameters, NVRTC for sm_90a without spills, and on the GPU equal to eager and to the simulator."""

from __future__ import annotations

import ctypes

import attrs
import pytest
import torch

from lamina.backends.cuda import CudaBackend, LaunchableKernel, compile_kernel, device_arch, emit_cuda, kernel_symbol
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import LaminaError, VerificationError
from lamina.core.ir import dtypes, kernel_ir as kir
from tests.backends.tma_box_kernels import box_copy, expected_box, stored_back
from tests.backends.tma_gemm_kernels import buffers, operands, tma_gemm

_TORCH = {dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16, dtypes.float32: torch.float32}


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is visible")(test))


# --- the printed source -----------------------------------------------------------

def test_the_pipelined_product_prints_tma_mbarriers_and_bf16_wgmma():
    source = emit_cuda(tma_gemm(70, 40, 200))
    assert ("tma_gemm(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ b, float* __restrict__ c, "
            "const __grid_constant__ lamina_tensor_map a_map, const __grid_constant__ lamina_tensor_map b_map)") in source
    assert "struct __align__(64) lamina_tensor_map {\n  unsigned long long opaque[16];\n};" in source
    assert ("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
            in source)
    assert "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;" in source
    assert "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" in source
    assert '"wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"' in source
    assert '"}, %16, %17, p, 1, 1, 0, 0;\\n}\\n"' in source
    body = source.split("__syncthreads();", 1)[1]
    order = ["lamina_mbarrier_wait(&empty[s], static_cast<unsigned>((round + 1) % 2));",
             "lamina_mbarrier_arrive_expect_tx(&full[s], 12288u);",
             "lamina_tma_load_2d(&a_tile[s * 4096], &a_map, static_cast<int>((int)blockIdx.y * 64), "
             "static_cast<int>(kt * 64), &full[s]);",
             "lamina_mbarrier_wait(&full[s], static_cast<unsigned>(round % 2));",
             "lamina_wgmma_bf16_n32(&a_tile[s * 4096 + 16], &b_tile[s * 2048 + 16], 1,",
             'asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");',
             "lamina_mbarrier_arrive(&empty[s]);"]
    assert [body.index(text) for text in order] == sorted(body.index(text) for text in order)
    assert "lamina_mbarrier_init(&empty[2], 128u);" in source.split("__syncthreads();", 1)[0]


@pytest.mark.parametrize("dtype, block_m, block_n", [(dtypes.bfloat16, 64, 32), (dtypes.float16, 128, 56),
                                                      (dtypes.bfloat16, 64, 256), (dtypes.bfloat16, 128, 128)])
def test_the_pipelined_product_compiles_for_sm_90a_without_spills(tmp_path, dtype, block_m, block_n):
    """Up to 128 accumulators per consumer thread: one consumer warpgroup of a 256-thread block has 255 registers."""
    kernel = tma_gemm(300, 300, 200, dtype=dtype, block_m=block_m, block_n=block_n)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert (compiled.spill_stores, compiled.spill_loads, compiled.stack_bytes) == (0, 0, 0)
    assert "serialized" not in compiled.log


def test_the_backend_compiles_tma_kernels_under_positional_names(tmp_path):
    compiled = CudaBackend(cache_dir=tmp_path).compile(kir.Program([tma_gemm(70, 40, 200)]), "sm_90")
    assert compiled["tma_gemm"].arch == "sm_90a" and not compiled["tma_gemm"].spills


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_a_tma_kernel_for_another_architecture_is_refused(arch):
    with pytest.raises(LaminaError, match="tensor memory accelerator"):
        kernel_arch(box_copy(16, 64, (8, 64), 0, 0), arch)


# --- the verifier ----------------------------------------------------------------------

def test_a_tensor_whose_rows_are_not_16_bytes_apart_is_refused_with_what_to_do():
    kernel = box_copy(16, 50, (8, 64), 0, 0)
    with pytest.raises(VerificationError, match=r"rows 50 elements \(100 bytes\) apart, for rows of 50; the TMA needs "
                                                r"rows a multiple of 16 bytes apart"):
        kir.verify_kernel(kernel)


def test_a_box_that_does_not_span_the_swizzle_is_refused():
    kernel = box_copy(16, 64, (8, 64), 0, 0)
    narrow = attrs.evolve(kernel, tensor_maps=[attrs.evolve(kernel.tensor_maps[0], box=(8, 32))])
    with pytest.raises(VerificationError, match="box rows must span the swizzle's 128 bytes"):
        kir.verify_kernel(narrow)


def test_an_mbarrier_touched_by_an_ordinary_store_is_refused():
    kernel = box_copy(16, 64, (8, 64), 0, 0)
    poking = attrs.evolve(kernel, body=kernel.body + (kir.Store("full", (kir.thread_idx(),), kir.thread_idx()),))
    with pytest.raises(VerificationError, match="Store touches mbarrier array full"):
        kir.verify_kernel(poking)


def test_the_printed_kernel_ir_shows_tensor_maps_and_the_new_statements():
    text = kir.format_kernel(tma_gemm(70, 40, 200))
    assert "  tensor map a_map: a[70][200] (rows 200 apart) in boxes of [64][64], 128-byte swizzle" in text
    assert "mbarrier init empty[2] expecting 128 arrivals" in text
    assert "mbarrier arrive full[s] expecting 12288 more bytes" in text
    assert "tma load a_tile[s][0][0] <- a_map at (blockIdx.y * 64, kt * 64), completing on full[s]" in text
    assert "mbarrier wait full[s] for the phase of parity round % 2" in text
    assert "wgmma m64n32k16 bf16 (acc[0][0]..acc[0][15]) += a_tile[s][0..63][16..31] x b_tile[s][0..31][16..31]^T" \
        in text


# --- on the GPU ------------------------------------------------------------------------

def on_the_gpu(kernel: kir.Kernel, arrays: dict[str, torch.Tensor], output: str, tmp_path) -> torch.Tensor:
    arch = kernel_arch(kernel, device_arch())
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), arch, cache_dir=tmp_path)
    on_device = {name: t.cuda() for name, t in arrays.items()}
    LaunchableKernel(kernel, compiled)(on_device)
    torch.cuda.synchronize()
    return on_device[output].cpu()


@gpu
@pytest.mark.parametrize("rows, columns, box, row, column, dtype, swizzle", [
    (20, 56, (16, 64), 8, 0, dtypes.bfloat16, 128),
    (13, 72, (8, 64), -3, 40, dtypes.float16, 128),
    (10, 20, (8, 8), 5, 16, dtypes.float32, 0),
])
def test_a_tma_copy_on_the_gpu_lands_where_the_simulator_puts_it(tmp_path, rows, columns, box, row, column, dtype,
                                                                   swizzle):
    """The swizzled tile is read back through ``lamina_swizzled_2``: equal boxes mean that the TMA placed every
    element where Kernel IR's swizzle says, with zeros outside the tensor."""
    kernel = box_copy(rows, columns, box, row, column, dtype=dtype, swizzle=swizzle)
    x = torch.randn(kernel.params[0].numel).to(_TORCH[dtype]) + 3
    out = on_the_gpu(kernel, {"x": x, "out": torch.full((box[0] * box[1],), float("nan"), dtype=x.dtype)}, "out",
                     tmp_path)
    assert torch.equal(out, expected_box(x, rows, columns, box, row, column))


@gpu
@pytest.mark.parametrize("m, n, k, dtype, block_m, block_n, stages", [
    (70, 40, 200, dtypes.bfloat16, 64, 32, 3),
    (37, 24, 72, dtypes.float16, 64, 16, 2),
    (300, 260, 520, dtypes.bfloat16, 128, 128, 3),
    (256, 256, 1024, dtypes.float16, 64, 256, 4),
])
def test_the_pipelined_product_on_the_gpu_agrees_with_eager_and_the_simulator(tmp_path, m, n, k, dtype, block_m,
                                                                              block_n, stages):
    a, b = operands(m, n, k, _TORCH[dtype])
    kernel = tma_gemm(m, n, k, dtype=dtype, block_m=block_m, block_n=block_n, stages=stages)
    computed = on_the_gpu(kernel, buffers(a, b), "c", tmp_path).view(m, n)
    assert not computed.isnan().any()
    eager = torch.matmul(a.cuda(), b.cuda().T).cpu()
    torch.testing.assert_close(computed.to(eager.dtype), eager, rtol=1.6e-2, atol=1e-2)
    scale = a.abs().double() @ b.abs().double().T
    assert ((computed.double() - a.double() @ b.double().T).abs() / scale).max() < 1e-5
    if m * n * k <= 70 * 40 * 200:
        simulated = buffers(a, b)
        simulate(kernel, simulated)
        assert ((computed.double() - simulated["c"].view(m, n).double()).abs() / scale).max() < 1e-5


def test_a_tma_store_prints_the_bulk_copy_its_commit_and_its_wait(tmp_path):
    kernel = tma_gemm(70, 40, 200, tma_store=True)
    source = emit_cuda(kernel)
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" in source
    tail = source.split("__syncthreads();")[-1]
    order = ["lamina_tma_store_2d(&c_map, static_cast<int>((int)blockIdx.y * 64), static_cast<int>((int)blockIdx.x * 32), "
             "&c_tile[0][0]);",
             'asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");',
             'asm volatile("cp.async.bulk.wait_group.read 0;\\n" ::: "memory");']
    assert [tail.index(text) for text in order] == sorted(tail.index(text) for text in order)
    assert "__shared__ __align__(128) float c_tile[64][32];" in source
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90a", cache_dir=tmp_path)
    assert not compiled.spills and compiled.stack_bytes == 0


@gpu
def test_a_tma_store_on_the_gpu_writes_the_part_of_the_box_inside_the_tensor(tmp_path):
    x = torch.randn(16 * 64).bfloat16()
    arrays = {"x": x, "out": torch.zeros(512, dtype=torch.bfloat16), "y": torch.full((440,), 7.0).bfloat16()}
    y = on_the_gpu(stored_back(), arrays, "y", tmp_path).view(11, 40)
    expected = torch.full((11, 40), 7.0).bfloat16()
    expected[5:11, 8:40] = x.view(16, 64)[0:6, 0:32]
    assert torch.equal(y, expected)


@gpu
@pytest.mark.parametrize("m, n, k, dtype, block_m, block_n", [(70, 40, 200, dtypes.bfloat16, 64, 32),
                                                              (300, 260, 520, dtypes.float16, 128, 128)])
def test_the_pipelined_product_stored_by_tma_on_the_gpu_agrees_with_eager(tmp_path, m, n, k, dtype, block_m, block_n):
    a, b = operands(m, n, k, _TORCH[dtype])
    kernel = tma_gemm(m, n, k, dtype=dtype, block_m=block_m, block_n=block_n, tma_store=True)
    computed = on_the_gpu(kernel, buffers(a, b), "c", tmp_path).view(m, n)
    assert not computed.isnan().any()
    scale = a.abs().double() @ b.abs().double().T
    assert ((computed.double() - a.double() @ b.double().T).abs() / scale).max() < 1e-5


def test_tensor_maps_are_encoded_once_per_buffer_address_in_the_order_of_the_parameters(monkeypatch):
    from lamina.backends.cuda import tensor_maps

    encoded = []

    def fake_encode(tensor_map, dtype, address, kernel, shape):
        encoded.append((tensor_map.name, dtype, address))
        return (ctypes.c_uint64 * 16)(address, len(encoded))

    monkeypatch.setattr(tensor_maps, "encode", fake_encode)
    arguments = tensor_maps.TensorMapArguments(tma_gemm(70, 40, 200))
    a, b, c = (torch.zeros(n, dtype=torch.bfloat16) for n in (70 * 200, 40 * 200, 2))
    first = arguments({"a": a, "b": b, "c": c}, None)
    again = arguments({"a": a, "b": b, "c": c}, None)
    assert [m[0] for m in first] == [a.data_ptr(), b.data_ptr()]
    assert [m[1] for m in again] == [1, 2] and len(encoded) == 2
    moved = torch.zeros_like(a)
    assert arguments({"a": moved, "b": b, "c": c}, None)[0][0] == moved.data_ptr()
    assert encoded[-1] == ("a_map", dtypes.bfloat16, moved.data_ptr())


def test_a_map_of_rows_known_only_at_run_time_is_encoded_at_the_sizes_of_each_call(monkeypatch):
    from lamina.backends.cuda import tensor_maps
    from lamina.core.ir import sizes

    encoded = []

    def fake_encode(tensor_map, dtype, address, kernel, shape):
        encoded.append((tensor_map.name, shape))
        return (ctypes.c_uint64 * 16)(address, len(encoded))

    monkeypatch.setattr(tensor_maps, "encode", fake_encode)
    kernel = tma_gemm(70, 40, 200)
    a_map, b_map = kernel.tensor_maps
    rows = attrs.evolve(a_map, shape=(sizes.symbol(0), 200))
    arguments = tensor_maps.TensorMapArguments(attrs.evolve(kernel, tensor_maps=(rows, b_map)))
    a, b, c = (torch.zeros(n, dtype=torch.bfloat16) for n in (70 * 200, 40 * 200, 2))
    for count in (70, 3, 70):
        arguments({"a": a, "b": b, "c": c}, {"s0": count})
    assert encoded == [("a_map", (70, 200)), ("b_map", (40, 200)), ("a_map", (3, 200))]


def test_a_bf16_wgmma_on_float32_arrays_or_from_registers_named_as_an_array_is_refused():
    kernel = tma_gemm(70, 40, 200)
    wgmma = next(s for s in kir.statements(kernel.body) if isinstance(s, kir.Wgmma))
    with pytest.raises(VerificationError, match="wgmma reads a_tile: it must be a f16 shared array in the 128-byte "
                                                "swizzle"):
        kir.verify_kernel(_replaced(kernel, wgmma, attrs.evolve(wgmma, operand_dtype=dtypes.float16)))
    with pytest.raises(VerificationError, match="wgmma with A from registers takes 4 values of A per thread, not an "
                                                "array and an index"):
        kir.verify_kernel(_replaced(kernel, wgmma, attrs.evolve(wgmma, a_from="registers")))


def _replaced(kernel: kir.Kernel, old, new) -> kir.Kernel:
    def body(statements):
        out = []
        for s in statements:
            if s is old:
                s = new
            elif isinstance(s, kir.For):
                s = attrs.evolve(s, body=body(s.body))
            elif isinstance(s, kir.If):
                s = attrs.evolve(s, then=body(s.then), orelse=body(s.orelse))
            out.append(s)
        return out

    return attrs.evolve(kernel, body=body(kernel.body))

"""Vector loads and stores in Kernel IR: how they print, what the verifier rejects, their
CUDA, and the simulator reporting a misaligned or out-of-bounds one as a fault."""

import pytest
import torch

from lamina.backends.cuda import assert_no_spills, compile_kernel, emit_cuda
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir as kir

F32, BF16 = dtypes.float32, dtypes.bfloat16
TX = kir.thread_idx("x")
ZERO = ex.const(0)


def copy_kernel(load_offset, store_offset=None, register_first=ZERO, width=4, dtype=F32, numel=64, threads=8,
                declarations=()):
    """Each thread copies ``width`` elements of ``x`` to ``y`` through a register array."""
    return kir.Kernel(
        "vector_copy",
        params=(kir.Param("x", dtype, numel), kir.Param("y", dtype, numel, writable=True)),
        arrays=(kir.Array("r", dtype, (1, 8), "register"),),
        body=tuple(declarations) + (
            kir.VectorLoad("r", (ZERO, register_first), "x", (load_offset,), width),
            kir.VectorStore("y", (load_offset if store_offset is None else store_offset,), "r", (ZERO, register_first), width),
        ),
        launch=kir.Launch((1, 1, 1), (threads, 1, 1)),
    )


def run(kernel, dtype=torch.float32):
    x = torch.randn(64).to(dtype)
    y = torch.zeros(64, dtype=dtype)
    report = simulate(kernel, {"x": x, "y": y}, raise_on_fault=False)
    return x, y, report


def test_an_aligned_copy_moves_every_element_and_is_clean():
    x, y, report = run(copy_kernel(TX * 4, threads=16))
    assert torch.equal(x, y)
    assert report.faults == []


def test_bfloat16_vectors_of_8_copy_16_bytes():
    x, y, report = run(copy_kernel(TX * 8, width=8, dtype=BF16), torch.bfloat16)
    assert torch.equal(x, y) and report.faults == []


def test_a_planted_misaligned_vector_load_is_reported():
    _, _, report = run(copy_kernel(TX * 4 + 1, store_offset=TX * 4, threads=15))
    (message,) = report.misaligned
    assert "vector load of 16 B of x at byte 4 is not 16-byte aligned, by block (0, 0, 0) thread (0, 0, 0)" in message
    assert "15 such accesses" in message
    with pytest.raises(SimulationError, match="not 16-byte aligned"):
        report.raise_for_faults()


def test_a_planted_misaligned_vector_store_is_reported_and_not_made():
    _, y, report = run(copy_kernel(TX * 4, store_offset=TX * 4 + 2, threads=15))
    (message,) = report.misaligned
    assert "vector store of 16 B of y at byte 8 is not 16-byte aligned" in message
    assert torch.count_nonzero(y) == 0


def test_a_misaligned_place_in_the_register_array_is_reported():
    half = kir.Declare("half", dtypes.index, TX % 2 * 2)
    _, _, report = run(copy_kernel(TX * 4, register_first=ex.Var("half"), declarations=[half]))
    load, store = report.misaligned
    assert "vector load of 16 B through register array r at element 2 is not 16-byte aligned, " \
           "by block (0, 0, 0) thread (1, 0, 0); 4 such accesses at this site" in load
    assert "vector store of 16 B through register array r at element 2" in store


def test_a_vector_that_runs_past_the_end_is_out_of_bounds():
    _, _, report = run(copy_kernel(TX * 4 + 36, threads=8))
    (load, store) = report.out_of_bounds
    assert "vector load of 4 elements of x at offset 64, outside [0, 64)" in load
    assert "vector store of 4 elements of y at offset 64" in store


def test_threads_that_do_not_run_a_vector_access_do_not_fault():
    kernel = copy_kernel(TX * 4 + 1)
    guarded = kir.Kernel(kernel.name, kernel.params, kernel.arrays,
                         (kir.If(ex.op("lt", TX, 0), kernel.body),), kernel.launch)
    assert run(guarded)[2].faults == []


def test_vector_accesses_print_with_their_width():
    text = kir.format_kernel(copy_kernel(TX * 4))
    assert "  vector load x4 r[0][0] <- x[threadIdx.x * 4]\n  vector store x4 y[threadIdx.x * 4] <- r[0][0]" in text


def test_renaming_arrays_renames_both_sides_of_a_vector_access():
    renamed = kir.rename_arrays(copy_kernel(TX * 4), {"x": "a", "r": "regs"})
    load, store = renamed.body
    assert (load.dst, load.src, store.dst, store.src) == ("regs", "a", "y", "regs")


@pytest.mark.parametrize("statement,problem", [
    (kir.VectorLoad("x", (ZERO,), "y", (ZERO,), 4), "vector load of y through x: it is not a register array"),
    (kir.VectorLoad("r", (ZERO, ZERO), "r", (ZERO, ZERO), 4), "vector load of r: it is not a global parameter"),
    (kir.VectorStore("x", (ZERO,), "r", (ZERO, ZERO), 4), "vector store to input parameter x"),
    (kir.VectorLoad("r", (ZERO, ZERO), "x", (ZERO,), 3), "vector load of 3 f32 elements of x: it moves 2, 4, 8, 16 bytes"),
    (kir.VectorLoad("r", (ZERO, ZERO), "x", (ZERO,), 8), "vector load of 8 f32 elements"),
    (kir.VectorLoad("r", (ZERO, ex.const(2)), "x", (ZERO,), 4), "vector load at element 2 of r is not aligned to 4 elements"),
    (kir.VectorLoad("r", (ZERO, ZERO), "x", (ex.const(6),), 4), "vector load at element 6 of x is not aligned"),
    (kir.VectorLoad("h", (ZERO, ZERO), "x", (ZERO,), 4), "vector load between f32 x and bf16 h: the types must match"),
    (kir.VectorLoad("r", (ZERO,), "x", (ZERO,), 4), "vector load through r with 1 indices; it has rank 2"),
    (kir.VectorLoad("odd", (ZERO, ZERO), "x", (ZERO,), 4), "its rows of 6 elements are not a whole number of 4-element vectors"),
])
def test_the_verifier_rejects_vector_accesses_that_cannot_work(statement, problem):
    kernel = kir.Kernel(
        "bad", params=(kir.Param("x", F32, 64), kir.Param("y", F32, 64, writable=True)),
        arrays=(kir.Array("r", F32, (1, 8), "register"), kir.Array("h", BF16, (1, 8), "register"),
                kir.Array("odd", F32, (1, 6), "register")),
        body=(statement,), launch=kir.Launch((1, 1, 1), (32, 1, 1)),
    )
    with pytest.raises(VerificationError, match=problem.replace("[", r"\[")):
        kir.verify_kernel(kernel)


def test_cuda_moves_each_vector_in_one_access_through_aligned_registers():
    source = emit_cuda(copy_kernel(TX * 8, width=8, dtype=BF16))
    assert "  __align__(16) __nv_bfloat16 r[1][8];\n" in source
    assert "*reinterpret_cast<uint4*>(&r[0][0]) = *reinterpret_cast<const uint4*>(&x[(int)threadIdx.x * 8]);" in source
    assert "*reinterpret_cast<uint4*>(&y[(int)threadIdx.x * 8]) = *reinterpret_cast<const uint4*>(&r[0][0]);" in source
    compiled = compile_kernel(source, "vector_copy", "sm_90")
    assert_no_spills(compiled)
    assert compiled.stack_bytes == 0


@pytest.mark.parametrize("dtype,width,vector_type,alignment", [
    (F32, 2, "uint2", 8), (BF16, 2, "unsigned int", 4), (BF16, 4, "uint2", 8), (F32, 4, "uint4", 16),
])
def test_narrower_vectors_use_narrower_types(dtype, width, vector_type, alignment):
    source = emit_cuda(copy_kernel(TX * width, width=width, dtype=dtype))
    assert f"*reinterpret_cast<{vector_type}*>(&r[0][0])" in source
    assert f"__align__({alignment}) {dtype.c_type} r[1][8];" in source
    assert compile_kernel(source, "vector_copy", "sm_90").stack_bytes == 0

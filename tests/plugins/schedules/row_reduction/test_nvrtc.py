"""Every kernel the row-reduction schedule writes compiles with NVRTC for sm_90, without spilling registers."""

import pytest

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.plugins.schedules.row_reduction import RowReductionSchedule

from .programs import BY_ID, compile_program, loop_kernel
from .test_simulated import KNOBS
from .test_tiling import SM_90

SCHEDULE = RowReductionSchedule()

MODEL_ROWS = {
    "scores_128": ({}, (200, 128)),
    "tinyllama_hidden_2048": ({}, (8, 2048)),
    "qwen_hidden_3584": ({}, (8, 3584)),
    "tinyllama_hidden_2048_many_rows": ({}, (256, 2048)),
    "qwen_hidden_3584_many_rows": ({}, (256, 3584)),
    "vocabulary_32000": ({}, (2, 32000)),
    "qwen_vocabulary_151936": ({}, (2, 151936)),
    "long_rows_on_a_block_of_1024": ({"threads": 1024}, (2, 2048)),
}
HEAVIEST = [BY_ID[name] for name in ("add_rms_norm", "causal_softmax", "softmax_bf16")]
"""The programs that keep the most in registers: two row arrays, a row and its mask, bf16 rows."""


def compiled(program, knobs, rows, length):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(loop_kernel(program, rows, length), SM_90, knobs), SM_90)
    return compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90")


@pytest.mark.parametrize("setting", KNOBS.values(), ids=list(KNOBS))
@pytest.mark.parametrize("program", HEAVIEST, ids=[p.id for p in HEAVIEST])
def test_every_pinned_setting_compiles_without_spills(program, setting):
    knobs, (rows, length) = setting
    assert_no_spills(compiled(program, knobs, rows, length))


@pytest.mark.parametrize("setting", MODEL_ROWS.values(), ids=list(MODEL_ROWS))
@pytest.mark.parametrize("program", [BY_ID["add_rms_norm"], BY_ID["softmax_bf16"]], ids=["add_rms_norm", "softmax_bf16"])
def test_rows_of_real_models_compile_without_spills(program, setting):
    """The rows that matter for speed, kept in registers (re-read past a vocabulary of 32000)."""
    knobs, (rows, length) = setting
    assert_no_spills(compiled(program, knobs, rows, length))


def test_causal_scores_of_2048_compile_without_spills():
    assert_no_spills(compiled(BY_ID["causal_softmax"], {}, 1, 2048))


def assert_no_spills(result):
    assert result.registers > 0
    assert (result.spill_stores, result.spill_loads) == (0, 0)


def test_a_norm_squares_by_multiplying_without_a_stack_frame():
    kernel = SCHEDULE.lower(SCHEDULE.schedule(loop_kernel(BY_ID["add_rms_norm"], 5, 100), SM_90, {}), SM_90)
    source = emit_cuda(kernel)
    assert "powf" not in source and "(row_x[j][e] + row_r[j][e]) * (row_x[j][e] + row_r[j][e])" in source
    assert compile_kernel(source, kernel_symbol(kernel), "sm_90").stack_bytes == 0


@pytest.mark.parametrize("program_id, length", [("rms_norm", 2048), ("rms_norm_bf16", 3584), ("add_rms_norm", 3584)])
def test_kernels_of_one_row_compile_without_spills(program_id, length):
    compilation = compile_program(BY_ID[program_id], 1, length)
    for tile, kernel in zip(compilation.tiles, compilation.kernels.kernels, strict=True):
        if tile.schedule == "row_reduction":
            assert_no_spills(compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), "sm_90"))


@pytest.mark.parametrize("program_id", ["rms_norm", "rms_norm_bf16"])
def test_a_norm_reads_and_writes_its_rows_16_bytes_at_a_time(program_id):
    kernel = SCHEDULE.lower(SCHEDULE.schedule(loop_kernel(BY_ID[program_id], 256, 2048), SM_90, {}), SM_90)
    source = emit_cuda(kernel)
    assert source.count("reinterpret_cast<const uint4*>") == 3
    assert_no_spills(compile_kernel(source, kernel_symbol(kernel), "sm_90"))

"""Three k-tile buffers rotate through counters; a power of two of them through a mask."""

from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import kernel_ir
from lamina.plugins.schedules.contraction import ContractionSchedule

from ..contraction_kernels import SM_90, matmul, simulate_case

SCHEDULE = ContractionSchedule()
RAGGED = matmul(37, 83, 29)
"""Six k-tiles of 16, the last one short: the counters wrap round twice."""


def _kernel(buffers: int) -> kernel_ir.Kernel:
    knobs = {"buffers": buffers, "block_m": 32, "block_n": 32, "thread_m": 4, "thread_n": 4, "in_block_k_splits": 1}
    return SCHEDULE.lower(SCHEDULE.schedule(RAGGED.kernel, SM_90, knobs), SM_90)


def _assigned(kernel: kernel_ir.Kernel) -> set[str]:
    return {s.var for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Assign)}


def test_three_buffers_rotate_through_counters_and_match_pytorch():
    kernel = _kernel(3)
    assert _assigned(kernel) == {"slot", "fill_slot"}
    inputs = RAGGED.inputs()
    out, report = simulate_case(RAGGED, kernel, inputs)
    assert relative_error(out, float64_reference(RAGGED.reference, tuple(inputs.values()))) < 1e-5
    assert (report.races, report.out_of_bounds, report.unwritten_reads) == ([], [], [])


def test_two_buffers_take_the_k_tile_modulo_two():
    assert _assigned(_kernel(2)) == set()

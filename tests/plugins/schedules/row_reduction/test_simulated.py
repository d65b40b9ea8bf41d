"""Row reductions run by the Kernel IR simulator against eager PyTorch in float64.

Every run raises on a race, an access out of bounds or misaligned, or a read of
unwritten shared memory, so passing is also "zero faults". Row lengths are not multiples
of 32 or of the thread count, nor all of them of the vector width (33 is read element by
element; 136 is 34 vectors of 4 fp32 and 17 of 8 bf16); row counts are odd and not
multiples of the rows per block.
"""

import attrs
import pytest
import torch

import lamina
from lamina.backends.reference.simulator import simulate
from lamina.bench.measure import float64_reference, relative_error
from lamina.core.ir import expr as ex, kernel_ir, loop_ir
from lamina.plugins.schedules.row_reduction import RowReductionSchedule

from .programs import BY_ID, PROGRAMS, compile_program, loop_kernel, run
from .test_tiling import SM_90

SCHEDULE = RowReductionSchedule()

SHAPES = [(7, 33), (3, 300), (3, 136)]

KNOBS = {
    "warp_per_row": ({"threads": 32, "rows_per_block": 1}, (5, 100)),
    "four_warps_four_rows": ({"threads": 32, "rows_per_block": 4}, (5, 100)),
    "block_of_64": ({"threads": 64}, (3, 300)),
    "block_of_64_reading_late": ({"threads": 64, "prefetch_epilogue_reads": False}, (3, 300)),
    "two_rows_of_128": ({"threads": 128, "rows_per_block": 2}, (3, 300)),
    "block_of_256_short_row": ({"threads": 256}, (3, 100)),
    "warp_rereading_the_row": ({"threads": 32, "rows_per_block": 2, "row_in_registers": False}, (5, 100)),
    "block_rereading_the_row": ({"threads": 128, "row_in_registers": False}, (3, 300)),
    "block_of_64_single_elements": ({"threads": 64, "vector_width": 1}, (3, 300)),
    "warp_of_pairs_two_rows": ({"threads": 32, "vector_width": 2, "rows_per_block": 2}, (5, 100)),
    "warp_of_eights": ({"threads": 32, "vector_width": 8}, (3, 296)),
}


def tolerance(program):
    return 1e-2 if program.dtype == torch.bfloat16 else 1e-5


def check(program, rows, length, knobs, schedule="row_reduction"):
    compilation, inputs, got = run(program, rows, length, schedule=schedule, knobs={"row_reduction": knobs})
    expected = float64_reference(program.fn, inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert ("row_reduction" in [t.schedule for t in compilation.tiles]) == (schedule == "row_reduction")
    for out, want in zip(got, expected, strict=True):
        assert out.dtype == program.dtype
        assert relative_error(out, want) < tolerance(program)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_default_decisions_match_pytorch(program, shape):
    check(program, *shape, knobs={})


@pytest.mark.parametrize("setting", KNOBS.values(), ids=list(KNOBS))
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_pinned_decisions_match_pytorch(program, setting):
    knobs, shape = setting
    check(program, *shape, knobs=knobs)


@pytest.mark.parametrize("program_id", ["rms_norm", "add_rms_norm", "rms_norm_bf16"])
@pytest.mark.parametrize("knobs", [{"threads": 32, "rows_per_block": 2}, {"threads": 64}], ids=["warps", "blocks"])
def test_many_rows_pinned_to_read_the_weight_early_match_pytorch(program_id, knobs):
    check(BY_ID[program_id], 201, 136, knobs={**knobs, "prefetch_epilogue_reads": True})


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_rows_of_one_element_need_no_reduction(program):
    """A reduction over one element is that element: what is left is pointwise."""
    check(program, 5, 1, knobs={}, schedule=None)


def first_row_only(kernel):
    """``kernel`` cut to its first row: a norm of one row written as one kernel."""
    (rows,) = kernel.body

    def one_row(buffer):
        shape = buffer.type.shape
        return attrs.evolve(buffer, type=attrs.evolve(buffer.type, shape=(1,) + shape[1:])) if len(shape) == 2 else buffer

    return attrs.evolve(kernel, inputs=tuple(map(one_row, kernel.inputs)), outputs=tuple(map(one_row, kernel.outputs)),
                        body=(attrs.evolve(rows, extent=1),))


@pytest.mark.parametrize("program, threads, width", [(BY_ID["rms_norm"], 512, 4), (BY_ID["rms_norm_bf16"], 256, 8)],
                         ids=["fp32", "bf16"])
def test_a_norm_of_one_row_gets_a_block_with_a_vector_per_thread(program, threads, width):
    kernel = first_row_only(loop_kernel(program, 2, 2048))
    loop_ir.verify_kernel(kernel)
    tile = SCHEDULE.schedule(kernel, SM_90, {})
    knobs = dict(tile.knobs)
    assert (knobs["threads"], tile.vector_width, knobs["elements_per_thread"], knobs["row_in_registers"]) == (
        threads, width, width, True)
    x, w = program.inputs(1, 2048)
    out = torch.zeros(2048, dtype=program.dtype)
    report = simulate(SCHEDULE.lower(tile, SM_90), {"x": x.flatten(), "w": w, "mul_1": out})
    assert report.total_bank_conflicts == 0
    assert relative_error(out.view(1, 2048), float64_reference(program.fn, (x, w))) < tolerance(program)


BLOCK_SETTINGS = {name: setting for name, setting in KNOBS.items() if setting[0]["threads"] > 32}


@pytest.mark.parametrize("setting", BLOCK_SETTINGS.values(), ids=list(BLOCK_SETTINGS))
def test_combining_across_the_warps_of_a_block_has_no_bank_conflicts(setting):
    knobs, (rows, length) = setting
    program = BY_ID["softmax"]
    kernel = loop_kernel(program, rows, length)
    (x,) = program.inputs(rows, length)
    out = torch.zeros(rows * length)
    report = simulate(SCHEDULE.lower(SCHEDULE.schedule(kernel, SM_90, knobs), SM_90), {"x": x.flatten(), "softmax": out})
    assert report.total_bank_conflicts == 0
    assert relative_error(out.view(rows, length), float64_reference(program.fn, (x,))) < tolerance(program)


def test_the_softmax_multiplies_by_the_reciprocal_of_the_row_sum_computed_once_per_row():
    """A masked score's dividend is zero, which sends IEEE division down its slow path."""
    kernel = SCHEDULE.lower(SCHEDULE.schedule(loop_kernel(BY_ID["softmax"], 5, 100), SM_90, {}), SM_90)
    values = [(s.var, s.init) for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Declare)]
    values += [(s.array, s.value) for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Store)]
    divisions = [name for name, value in values if value is not None
                 for node in ex.walk(value) if isinstance(node, ex.Op) and node.op == "div"]
    assert divisions == ["acc1_reciprocal"]


def test_global_average_pooling_is_one_row_per_channel():
    """An image's height and width are one row of the reduction (13 x 11 = 143 elements, no multiple
    of a vector), so global average pooling runs on this schedule, not on the generic one."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 13, 11, dtype=torch.bfloat16)

    def pool(x):
        return torch.nn.functional.adaptive_avg_pool2d(torch.relu(x), 1)

    compiled = lamina.compile(pool, (x,))
    assert [t.schedule for t in compiled.compilation.tiles] == ["row_reduction"]
    reference = float64_reference(pool, (x,))
    assert relative_error(compiled(x), reference) <= 1.25 * relative_error(pool(x), reference) + 1e-3


def test_a_norm_over_channels_stored_apart_is_one_row_per_position():
    """Whisper normalises a convolution's output over its channels, which lie a row of positions
    apart: each element is a load of its own, but the rows still run on this schedule."""
    compilation = compile_program(BY_ID["layer_norm_over_channels"], 70, 100)
    assert [t.schedule for t in compilation.tiles] == ["row_reduction"]


@pytest.mark.gpu
def test_a_norm_over_channels_stored_apart_matches_eager_on_the_gpu():
    """Whisper's size: 768 channels of 1 500 positions, in bf16."""
    torch.manual_seed(3)
    args = (torch.randn(768, 1500, dtype=torch.bfloat16, device="cuda"),
            torch.randn(768, dtype=torch.bfloat16, device="cuda"), torch.randn(768, dtype=torch.bfloat16, device="cuda"))
    fn = BY_ID["layer_norm_over_channels"].fn
    compiled = lamina.compile(fn, args)
    assert [t.schedule for t in compiled.compilation.tiles] == ["row_reduction"]
    reference = float64_reference(fn, args)
    assert relative_error(compiled(*args), reference) <= 1.25 * relative_error(fn(*args), reference) + 1e-3

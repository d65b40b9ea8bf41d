"""The transpose schedule: copies that read their input across rows, exchanged through shared memory."""

import pytest
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.targets import SM90 as SM_90
from lamina.plugins.schedules.pointwise import PointwiseSchedule
from lamina.plugins.schedules.transpose import TransposeSchedule

SCHEDULE = TransposeSchedule()
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32]


def random(shape, dtype):
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, dtype=dtype)
    return torch.randn(shape).to(dtype)


def schedules(compiled):
    return [t.schedule for t in compiled.compilation.tiles]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(37, 45), (3, 64, 96), (2, 5, 33, 17)], ids=str)
def test_a_transposed_copy_runs_on_it_and_equals_eager(shape, dtype):
    """Axes no tile divides, batch axes before them, every dtype of 4 bytes or fewer."""
    x = random(shape, dtype)
    compiled = lamina.compile(lambda x: x.transpose(-1, -2).contiguous(), (x,))
    assert schedules(compiled) == ["transpose"]
    assert torch.equal(compiled(x), x.transpose(-1, -2))


def test_a_cast_on_the_way_and_an_axis_moved_from_the_middle():
    x = random((4, 40, 6, 36), torch.bfloat16)

    def permuted(x):
        return x.permute(0, 2, 3, 1).float()

    compiled = lamina.compile(permuted, (x,))
    assert schedules(compiled) == ["transpose"]
    assert torch.equal(compiled(x), permuted(x))


def test_the_tile_ir_says_which_axis_each_side_walks():
    x = random((3, 37, 45), torch.bfloat16)
    tile = lamina.compile(lambda x: x.transpose(-1, -2).contiguous(), (x,)).ir("tile")
    assert tile.splitlines()[1:] == [
        "  grid (2, 2, 3) blocks of 256 threads, 2112 B shared",
        "  parallel i2 (37): block.x tile 32 = thread.x 32 x 1 per thread (contiguous)",
        "  parallel i1 (45): block.y tile 32 = thread.y 8 x 4 per thread (strided by 8)",
        "  parallel i0 (3): block.z tile 1 = thread.z 1 x 1 per thread (contiguous)",
        "  shared x[i0, i2, i1] as bf16[i2 32][i1 32 + pad 1], 1 buffer, copy load_store 2 B",
    ]


@pytest.mark.parametrize("program, reason", [
    (lambda x: x + 1, "reads along its rows"),
    (lambda x: x[:, :40].transpose(0, 1) + x[:, 8:], "reads its input twice"),
    (lambda x: x[:, :8].transpose(0, 1) * 2, "an axis shorter than 16"),
])
def test_other_kernels_are_not_its(program, reason):
    x = random((40, 48), torch.float32)
    compiled = lamina.compile(program, (x,))
    assert "transpose" not in schedules(compiled), reason
    torch.testing.assert_close(compiled(x), program(x))


def test_the_cost_model_weighs_a_read_across_rows_at_a_sector_per_element():
    """The pointwise schedule would read each bf16 element of the input with a 32-byte sector."""
    x = random((2048, 4096), torch.bfloat16)
    kernel = lamina.compile(lambda x: x.t().contiguous(), (x,)).compilation.loop.kernels[0]
    assert PointwiseSchedule().estimate_cost(kernel, SM_90) > 5 * SCHEDULE.estimate_cost(kernel, SM_90)


def test_attention_values_copied_k_major_run_on_it():
    """On Hopper the second product of attention reads its values with the positions last."""
    q, k, v = (random((1, 2, 136, 72), torch.bfloat16) for _ in range(3))

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = lamina.compile(attention, (q, k, v), target="sm_90")
    assert ("v_k_major", "transpose") in [(t.kernel.name, t.schedule) for t in compiled.compilation.tiles]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_its_kernels_compile_with_nvrtc_without_spills(arch, tmp_path):
    x = random((3, 37, 45), torch.bfloat16)
    program = lamina.compile(lambda x: x.transpose(-1, -2).float(), (x,), target=arch).compilation.kernels
    (compiled,) = CudaBackend(cache_dir=tmp_path).compile(program, arch).values()
    assert compiled.spill_stores == 0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 3072, 512), (8, 32, 96, 2048), (1000, 3001)], ids=str)
def test_transposed_copies_equal_eager_on_the_gpu(shape, dtype):
    x = random(shape, dtype).cuda()
    compiled = lamina.compile(lambda x: x.transpose(-1, -2).contiguous(), (x,))
    assert schedules(compiled) == ["transpose"]
    assert torch.equal(compiled(x), x.transpose(-1, -2))

"""The same programs on the GPU, and matmul-shaped programs up to 1024 x 1024 x 1024."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error

from tests.end_to_end.programs import CASES, running_example

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("schedule", [None, "generic"], ids=["default", "generic"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_program_matches_pytorch_on_the_gpu(case, schedule):
    inputs = case.inputs("cuda")
    compiled = lamina.compile(case.fn, inputs, schedule=schedule)
    out = compiled(*inputs)
    assert out.is_cuda
    assert relative_error(out, float64_reference(case.fn, inputs)) < 1e-4


@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (127, 129, 131), (256, 512, 128), (1000, 1000, 1000), (1024, 1024, 1024)])
def test_matmul_shapes_match_pytorch_on_the_gpu(m, k, n):
    inputs = (torch.randn(m, k, device="cuda"), torch.randn(k, device="cuda"), torch.randn(k, n, device="cuda"))
    compiled = lamina.compile(running_example, inputs)
    out = compiled(*inputs)
    assert relative_error(out, float64_reference(running_example, inputs)) < 1e-4


def test_compiled_function_runs_inside_a_cuda_graph():
    inputs = CASES[0].inputs("cuda")
    compiled = lamina.compile(running_example, inputs)
    compiled(*inputs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(*inputs)
    for t, fresh in zip(inputs, CASES[0].inputs("cuda")):
        t.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out, float64_reference(running_example, inputs)) < 1e-4


def test_the_kernels_are_compiled_when_compiling_not_at_the_first_call(tmp_path):
    """With inputs on the GPU, compiling loads every kernel (through NVRTC), so that the first call only runs."""
    inputs = CASES[0].inputs("cuda")
    compiled = lamina.compile(running_example, inputs, cache_dir=str(tmp_path))
    (specialization,) = compiled.specializations.values()
    assert list(specialization._runners) == [("cuda", inputs[0].device)]
    assert any(tmp_path.iterdir())  # the cubins were written while compiling
    runner = specialization._runners[("cuda", inputs[0].device)]
    compiled(*inputs)
    assert specialization._runners[("cuda", inputs[0].device)] is runner

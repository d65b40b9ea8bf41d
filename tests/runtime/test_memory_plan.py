"""Temporaries share one arena by liveness, and sharing never corrupts a result."""

import itertools

import attrs
import pytest
import torch

import lamina
from lamina.backends.memory_plan import ALIGNMENT, MemoryPlan, plan_memory
from lamina.bench.measure import float64_reference, relative_error


def chain(x, w1, w2, w3, w4):
    """Four matmuls: each one's input is dead once it has run."""
    h = torch.tanh(x @ w1)
    h = torch.tanh(h @ w2)
    h = torch.tanh(h @ w3)
    return h @ w4


def long_lived(x, w1, w2, w3, w4, w5):
    """``a`` is read by the first and by the last kernel: nothing may reuse its bytes in between."""
    a = torch.tanh(x @ w1)
    b = torch.tanh(a @ w2)
    c = torch.tanh(b @ w3)
    d = torch.tanh(c @ w4)
    return d @ w5 + a.sum(dim=-1, keepdim=True)


def chain_inputs():
    return (torch.randn(19, 24), torch.randn(24, 40), torch.randn(40, 40), torch.randn(40, 33), torch.randn(33, 7))


def long_lived_inputs():
    return (torch.randn(21, 24), torch.randn(24, 36), torch.randn(36, 36), torch.randn(36, 36),
            torch.randn(36, 36), torch.randn(36, 5))


def check_no_live_overlap(plan: MemoryPlan) -> None:
    for p in plan.placements:
        assert p.offset % ALIGNMENT == 0
        assert p.offset + p.nbytes <= plan.arena_bytes
    for p, q in itertools.combinations(plan.placements, 2):
        if p.overlaps_in_time(q):
            assert p.offset + p.nbytes <= q.offset or q.offset + q.nbytes <= p.offset, (str(p), str(q))


def test_a_chain_reuses_bytes_and_stays_correct():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    plan = compiled.memory_plan
    assert len(plan.placements) >= 3
    assert plan.arena_bytes < plan.temporary_bytes
    check_no_live_overlap(plan)
    assert relative_error(compiled(*inputs), float64_reference(chain, inputs)) < 1e-5


def test_a_long_lived_temporary_survives_the_reuse_around_it():
    inputs = long_lived_inputs()
    compiled = lamina.compile(long_lived, inputs)
    plan = compiled.memory_plan
    assert plan.arena_bytes < plan.temporary_bytes
    check_no_live_overlap(plan)
    assert any(p.last - p.first >= 3 for p in plan.placements)
    assert relative_error(compiled(*inputs), float64_reference(long_lived, inputs)) < 1e-5


def test_a_plan_that_shares_live_bytes_corrupts_the_result():
    """The correctness checks above can fail: put every temporary at offset 0 and the result breaks."""
    inputs = long_lived_inputs()
    compiled = lamina.compile(long_lived, inputs)
    runner = compiled.runner(torch.device("cpu"))
    good = runner.memory_plan
    widest = max(p.nbytes for p in good.placements)
    runner.memory_plan = MemoryPlan([attrs.evolve(p, offset=0) for p in good.placements], widest)
    assert relative_error(compiled(*inputs), float64_reference(long_lived, inputs)) > 1e-3


def test_each_specialisation_has_its_own_plan():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    taller = (torch.randn(45, 24),) + inputs[1:]
    assert relative_error(compiled(*taller), float64_reference(chain, taller)) < 1e-5
    small, large = (s.memory_plan for s in compiled.specializations.values())
    assert large.arena_bytes > small.arena_bytes
    check_no_live_overlap(large)


def test_a_program_without_temporaries_has_an_empty_arena():
    x, w = torch.randn(9, 12), torch.randn(12, 5)
    compiled = lamina.compile(lambda x, w: torch.relu(x @ w), (x, w))
    assert compiled.memory_plan.placements == ()
    assert compiled.memory_plan.arena_bytes == 0
    assert relative_error(compiled(x, w), torch.relu(x.double() @ w.double())) < 1e-5


def test_the_plan_prints_each_temporary_with_its_bytes_and_kernels():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    plan = plan_memory(compiled.compilation.loop, compiled.compilation.kernels)
    text = str(plan)
    lines = text.splitlines()
    assert lines[0].startswith(f"memory plan: {len(plan.placements)} temporaries in an arena of ")
    for p in plan.placements:
        assert f"  {p.buffer.name}: {p.buffer.type}  bytes [{p.offset}, {p.offset + p.nbytes})  kernels {p.first}..{p.last}" in lines


@pytest.mark.gpu
def test_peak_memory_of_an_mlp_is_within_1_2x_of_eager_on_the_gpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.SiLU(), torch.nn.Linear(1024, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256),
    ).cuda().eval()
    x = torch.randn(4096, 256, device="cuda")
    compiled = lamina.compile(model, (x,))
    with torch.no_grad():
        compiled(x)
        model(x)

    def peak(fn) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.no_grad():
            out = fn(x)
        torch.cuda.synchronize()
        del out
        return torch.cuda.max_memory_allocated() - before

    eager, ours = peak(model), peak(compiled)
    assert ours <= 1.2 * eager, f"lamina's forward pass peaked at {ours} bytes, eager PyTorch's at {eager}"
    with torch.no_grad():
        assert relative_error(compiled(x), model.double()(x.double())) < 1e-4

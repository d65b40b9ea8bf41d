"""Buffers live from their first kernel to their last, and the runner follows the plan."""

import weakref

import attrs
import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.runtime.memory_plan import MemoryPlan, plan_memory
from lamina.runtime.program_runner import ProgramRunner


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


def check_lifetimes_cover_every_use(compiled) -> None:
    plan = compiled.memory_plan
    kernels = compiled.compilation.kernels.kernels
    for t in plan.lifetimes:
        touched = [k for k, kernel in enumerate(kernels) if any(p.name == t.buffer.name for p in kernel.params)]
        assert (t.first, t.last) == (min(touched), max(touched)), str(t)


def test_a_chain_keeps_few_buffers_live_and_stays_correct():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    plan = compiled.memory_plan
    assert len(plan.lifetimes) >= 4
    assert plan.peak_bytes < plan.total_bytes
    check_lifetimes_cover_every_use(compiled)
    assert relative_error(compiled(*inputs), float64_reference(chain, inputs)) < 1e-5


def test_a_long_lived_temporary_survives_the_reuse_around_it():
    inputs = long_lived_inputs()
    compiled = lamina.compile(long_lived, inputs)
    plan = compiled.memory_plan
    assert plan.peak_bytes < plan.total_bytes
    check_lifetimes_cover_every_use(compiled)
    assert any(t.last - t.first >= 3 for t in plan.lifetimes)
    assert relative_error(compiled(*inputs), float64_reference(long_lived, inputs)) < 1e-5


def test_a_buffer_released_after_a_kernel_is_free_before_the_next_kernel_allocates(monkeypatch):
    """Nothing in the runner holds a released buffer while the next kernel's buffers are allocated (the
    arguments of the last launch did, and the peak held one dead buffer more than the plan). The
    launches here keep nothing, as the CUDA driver's keep nothing."""
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    runner = ProgramRunner(compiled.compilation.loop, compiled.compilation.kernels,
                           launch=lambda kernel, arguments, values: None, device=torch.device("cpu"))
    made: dict[str, weakref.ref] = {}
    alive_at_allocation = []
    allocate = ProgramRunner._empty

    def empty(self, buffer, values):
        alive_at_allocation.append((buffer.name, {name for name, ref in made.items() if ref() is not None}))
        tensor = allocate(self, buffer, values)
        made[buffer.name] = weakref.ref(tensor)
        return tensor

    monkeypatch.setattr(ProgramRunner, "_empty", empty)
    runner(*inputs)
    plan = runner.memory_plan
    assert len(alive_at_allocation) == len(plan.lifetimes) >= 3
    for name, alive in alive_at_allocation:
        first = plan.lifetime(name).first
        assert alive == {t.buffer.name for t in plan.lifetimes
                         if t.buffer.name in made and t.live_at(first) and t.buffer.name != name}, name


def test_a_plan_that_releases_a_buffer_too_early_is_caught():
    """The runner follows the plan: release the long-lived temporary after its first kernel and the call fails."""
    inputs = long_lived_inputs()
    compiled = lamina.compile(long_lived, inputs)
    runner = compiled.runner(torch.device("cpu"))
    good = runner.memory_plan
    longest = max((t for t in good.lifetimes if not t.output), key=lambda t: t.last - t.first)
    early = attrs.evolve(longest, last=longest.first)
    runner.memory_plan = MemoryPlan([early if t is longest else t for t in good.lifetimes], good.kernel_count)
    with pytest.raises(KeyError, match=longest.buffer.name):
        compiled(*inputs)


def test_each_specialisation_has_its_own_plan():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    taller = (torch.randn(45, 24),) + inputs[1:]
    assert relative_error(compiled(*taller), float64_reference(chain, taller)) < 1e-5
    small, large = (s.memory_plan for s in compiled.specializations.values())
    assert large.peak_bytes > small.peak_bytes


def test_a_program_without_temporaries_plans_only_its_output():
    x, w = torch.randn(9, 12), torch.randn(12, 5)
    compiled = lamina.compile(lambda x, w: torch.relu(x @ w), (x, w))
    assert [t.output for t in compiled.memory_plan.lifetimes] == [True]
    assert compiled.memory_plan.peak_bytes == 9 * 5 * 4
    assert relative_error(compiled(x, w), torch.relu(x.double() @ w.double())) < 1e-5


def test_the_plan_prints_each_buffer_with_its_bytes_and_kernels():
    inputs = chain_inputs()
    compiled = lamina.compile(chain, inputs)
    plan = plan_memory(compiled.compilation.loop, compiled.compilation.kernels)
    lines = str(plan).splitlines()
    assert lines[0].startswith("memory plan: ") and " live at once " in lines[0]
    for t in plan.lifetimes:
        assert any(line.startswith(f"  {t.buffer.name}: {t.buffer.type}  ") and f"from kernel {t.first}" in line
                   for line in lines)


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

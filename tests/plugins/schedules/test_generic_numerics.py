"""The generic schedule's kernels, run by the Kernel IR simulator, against eager PyTorch."""

import pytest
import torch

from lamina.backends.cuda.targets import SM90 as TARGET
from lamina.backends.reference.simulator import simulate
from lamina.core.ir import kernel_ir
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.plugins.fusion import FuseEpilogueIntoReduction, InlinePointwiseProducers, RemoveDeadBuffers
from lamina.plugins.schedules.generic import GenericSchedule
from lamina.runtime.program_runner import ProgramRunner
from tests.core.stages import tensor_programs as tp

RULES = [InlinePointwiseProducers(), FuseEpilogueIntoReduction(), RemoveDeadBuffers()]


def run_generic(loop_program, inputs, knobs=None):
    schedule = GenericSchedule()
    kernels = kernel_ir.Program(
        [schedule.lower(schedule.schedule(k, TARGET, knobs or {}), TARGET) for k in loop_program.kernels]
    )

    def launch(kernel, buffers, sizes):
        simulate(kernel, buffers, raise_on_fault=True)

    return ProgramRunner(loop_program, kernels, launch, torch.device("cpu"))(*inputs)


def relative_error(got, expected):
    return ((got.double() - expected).norm() / expected.norm()).item()


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("case", tp.CASES, ids=lambda c: c.id)
def test_generic_kernels_match_pytorch(case, fused):
    inputs = [t.float() for t in case.inputs()]
    program = lower_to_loops(case.program)
    if fused:
        program = fuse(program, RULES, TARGET, {})
    (got,) = run_generic(program, inputs)
    expected = case.reference(*(t.double() for t in inputs))
    assert got.shape == expected.shape
    assert relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("threads", [32, 64, 256])
def test_pinned_thread_counts_compute_the_same(threads):
    inputs = [torch.randn(17, 65), torch.randn(65), torch.randn(65, 19)]
    program = fuse(lower_to_loops(tp.running_example(17, 65, 19)), RULES, TARGET, {})
    (got,) = run_generic(program, inputs, {"threads": threads})
    assert relative_error(got, tp.running_example_reference(*(t.double() for t in inputs))) < 1e-5


def test_full_reduction_runs_in_one_thread():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 300)
    program = fuse(lower_to_loops(b.program(b.reduce(x, (0,), "max"))), RULES, TARGET, {})
    inputs = [torch.randn(300)]
    (got,) = run_generic(program, inputs)
    assert got.item() == inputs[0].max().item()


def test_outputs_that_repeat_or_name_inputs_are_copies():
    b = tp.TensorProgramBuilder()
    x = b.input("x", 5, 3)
    doubled = b.elementwise("double", lambda a: tp.mul(a, 2.0), x)
    program = fuse(lower_to_loops(b.program(x, doubled, doubled)), RULES, TARGET, {})
    inputs = [torch.randn(5, 3)]
    got = run_generic(program, inputs)
    torch.testing.assert_close(got, [inputs[0], inputs[0] * 2, inputs[0] * 2], rtol=0, atol=0)

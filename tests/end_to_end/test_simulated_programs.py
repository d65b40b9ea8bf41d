"""Whole programs through all six levels, run on the Kernel IR simulator, against PyTorch."""

import copy
import functools

import pytest
import torch

import lamina
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.cuda.wgmma import kernel_arch
from lamina.bench.measure import float64_reference, relative_error

from tests.end_to_end.programs import CASES

SCHEDULES = [None, "generic"]


@functools.cache
def compiled_case(case, schedule=None):
    """The case compiled once per schedule with its inputs: the simulator's test and NVRTC's
    check the same program."""
    inputs = case.inputs()
    return lamina.compile(case.fn, inputs, schedule=schedule), inputs


@pytest.mark.parametrize("schedule", SCHEDULES, ids=["default", "generic"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_program_matches_pytorch_on_the_simulator(case, schedule):
    compiled, inputs = compiled_case(case, schedule)
    out = compiled(*inputs)
    assert relative_error(out, float64_reference(case.fn, inputs)) < 1e-5


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_emitted_kernel_compiles_for_sm_90_without_spills(case):
    compiled, _ = compiled_case(case)
    for kernel in compiled.compilation.kernels.kernels:
        result = compile_kernel(compiled.compilation.sources[kernel.name], kernel.name, kernel_arch(kernel, "sm_90"))
        assert result.registers > 0
        assert (result.spill_stores, result.spill_loads) == (0, 0), kernel.name


def test_running_example_is_one_kernel_on_the_contraction_schedule():
    compiled, _ = compiled_case(CASES[0])
    assert compiled.kernel_count == 1
    assert compiled.compilation.loop.temporaries == ()
    assert [t.schedule for t in compiled.compilation.tiles] == ["contraction"]


def test_a_new_shape_compiles_once_more_and_is_cached():
    case = CASES[0]
    inputs = case.inputs()
    compiled = lamina.compile(case.fn, inputs)
    x, bias, w = inputs
    taller = torch.randn(17, 64)
    assert relative_error(compiled(taller, bias, w), float64_reference(case.fn, (taller, bias, w))) < 1e-5
    assert len(compiled.specializations) == 2
    assert relative_error(compiled(x, bias, w), float64_reference(case.fn, inputs)) < 1e-5
    compiled(torch.randn(17, 64), bias, w)
    assert [shapes[0][0] for shapes in compiled.specializations] == [(16, 64), (17, 64)]


def test_a_new_dtype_compiles_once_more():
    case = CASES[0]
    compiled = lamina.compile(case.fn, case.inputs())
    x, bias, w = case.inputs()
    out = compiled(x.double(), bias.double(), w.double())
    assert out.dtype == torch.float64
    assert relative_error(out, float64_reference(case.fn, (x, bias, w))) < 1e-5
    assert [sig[2][1] for sig in compiled.specializations] == [torch.float32, torch.float64]


def test_wrong_number_of_inputs_is_a_clear_error():
    case = CASES[0]
    compiled, _ = compiled_case(case)
    with pytest.raises(lamina.LaminaError, match="compiled for 3 inputs and was called with 2"):
        compiled(*case.inputs()[:2])


def test_module_parameters_are_inputs_of_the_compiled_program():
    model = torch.nn.Sequential(torch.nn.Linear(24, 13), torch.nn.ReLU(), torch.nn.Linear(13, 5))
    x = torch.randn(7, 24)
    compiled = lamina.compile(model, (x,))
    kinds = [i.kind for i in compiled.compilation.graph.inputs]
    assert kinds.count("parameter") == 4
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(x.double())
        assert relative_error(compiled(x), reference) < 1e-5
        model[0].weight.mul_(2.0)
        reference = copy.deepcopy(model).double()(x.double())
        assert relative_error(compiled(x), reference) < 1e-5

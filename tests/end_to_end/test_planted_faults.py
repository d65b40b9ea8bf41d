"""The simulator catches faults planted in the kernel lamina really emits for the running example."""

import attrs
import pytest
import torch

import lamina
from lamina.backends.reference.simulator import simulate
from lamina.core.ir import expr as ex, kernel_ir

from tests.end_to_end.programs import running_example
from tests.plugins.schedules.contraction_kernels import rewritten

INPUTS = (torch.randn(17, 65), torch.randn(65), torch.randn(65, 19))


def emitted_kernel(**settings) -> kernel_ir.Kernel:
    (kernel,) = lamina.compile(running_example, INPUTS, **settings).compilation.kernels.kernels
    return kernel


def arrays(kernel):
    values = dict(zip(("x", "bias", "w"), INPUTS))
    found = {}
    for p in kernel.params:
        found[p.name] = torch.empty(p.numel) if p.writable else values[p.name].reshape(-1).clone()
    return found


@pytest.mark.parametrize("schedule", ["generic", "contraction"])
def test_the_unmodified_kernels_are_clean(schedule):
    kernel = emitted_kernel(schedule=schedule)
    report = simulate(kernel, arrays(kernel))
    assert report.faults == [] and report.total_bank_conflicts == 0


def test_a_removed_barrier_is_reported_as_a_race():
    kernel = emitted_kernel()
    barriers = [s for s in kernel_ir.statements(kernel.body) if isinstance(s, kernel_ir.Barrier)]
    assert barriers
    racy = attrs.evolve(kernel, body=rewritten(kernel.body, lambda s: [] if isinstance(s, kernel_ir.Barrier) else [s]))
    report = simulate(racy, arrays(racy), raise_on_fault=False)
    assert report.races, str(report)


def test_an_index_off_by_one_is_reported_as_out_of_bounds():
    kernel = emitted_kernel()

    def shift_output_store(s):
        if isinstance(s, kernel_ir.Store) and s.array == "relu":
            return [attrs.evolve(s, index=(ex.op("add", s.index[0], 1),))]
        return [s]

    shifted = attrs.evolve(kernel, body=rewritten(kernel.body, shift_output_store))
    report = simulate(shifted, arrays(shifted), raise_on_fault=False)
    assert any("relu" in message for message in report.out_of_bounds), str(report)


def test_an_unpadded_shared_tile_has_bank_conflicts_the_padded_one_has_not():
    padded, unpadded = emitted_kernel(), emitted_kernel(knobs={"contraction.padding": 0})
    assert simulate(padded, arrays(padded)).total_bank_conflicts == 0
    assert simulate(unpadded, arrays(unpadded)).total_bank_conflicts > 0

"""The simulator's mbarriers and TMA copies: phases that complete on arrivals and bytes, boxes
zero-filled past the tensor's edges, and the faults of a kernel that misuses them."""

from __future__ import annotations

import attrs
import pytest
import torch

from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import const
from tests.backends.tma_box_kernels import box_copy, expected_box, stored_back


def run(kernel, x: torch.Tensor, count: int, raise_on_fault: bool = True):
    arrays = {"x": x, "out": torch.full((count,), float("nan"), dtype=x.dtype)}
    report = simulate(kernel, arrays, raise_on_fault=raise_on_fault)
    return arrays["out"], report


@pytest.mark.parametrize("rows, columns, box, row, column, dtype, swizzle, stride", [
    (20, 64, (8, 64), 0, 0, dtypes.bfloat16, 128, None),
    (20, 56, (16, 64), 8, 0, dtypes.bfloat16, 128, None),       # past the last row and column
    (13, 72, (8, 64), -3, 40, dtypes.float16, 128, 80),          # before the first row, a padded row stride
    (10, 20, (8, 8), 5, 16, dtypes.float32, 0, None),            # unswizzled float32, ragged on both sides
])
def test_a_copy_brings_the_box_with_zeros_outside_the_tensor(rows, columns, box, row, column, dtype, swizzle, stride):
    kernel = box_copy(rows, columns, box, row, column, dtype=dtype, swizzle=swizzle, row_stride=stride)
    x = torch.randn(kernel.params[0].numel).to({dtypes.bfloat16: torch.bfloat16, dtypes.float16: torch.float16,
                                                 dtypes.float32: torch.float32}[dtype]) + 3
    out, report = run(kernel, x, box[0] * box[1])
    assert torch.equal(out, expected_box(x, rows, columns, box, row, column, stride))
    assert (out == 0).any() == (row < 0 or row + box[0] > rows or column + box[1] > columns)
    assert not report.faults


def test_reading_a_copy_before_waiting_for_its_phase_is_a_race():
    _, report = run(box_copy(16, 64, (8, 64), 0, 0, wait=False), torch.randn(16 * 64).bfloat16(), 512, False)
    assert len(report.races) == 1
    assert "which a TMA copy wrote completing phase 0 of mbarrier full[0] of block (0, 0, 0), before the thread saw " \
           "that phase complete" in report.races[0]


def test_a_phase_waits_for_its_bytes_as_well_as_its_arrivals():
    with pytest.raises(SimulationError, match=r"(?s)deadlock.*thread \(0, 0, 0\) \(and 127 more threads\) waits for "
                                              r"the phase of parity 0 of mbarrier full\[0\] of block \(0, 0, 0\), in "
                                              r"phase 0, 0 of its 1 arrivals and 16 transaction bytes still to come"):
        run(box_copy(16, 64, (8, 64), 0, 0, extra_bytes=16), torch.randn(16 * 64).bfloat16(), 512)


def test_a_phase_waits_for_every_arrival_its_init_expects():
    with pytest.raises(SimulationError, match=r"(?s)deadlock.*mbarrier full\[0\] of block \(0, 0, 0\), in phase 0, "
                                              r"1 of its 2 arrivals and 0 transaction bytes still to come"):
        run(box_copy(16, 64, (8, 64), 0, 0, arrivals=2), torch.randn(16 * 64).bfloat16(), 512)


def test_using_a_barrier_with_no_barrier_after_its_init_is_a_fault():
    _, report = run(box_copy(16, 64, (8, 64), 0, 0, barrier_after_init=False), torch.randn(16 * 64).bfloat16(), 512,
                    False)
    assert report.async_protocol == [
        "kernel box_copy: wait on mbarrier full[0] of block (0, 0, 0) by block (0, 0, 0) thread (1, 0, 0), with no "
        "barrier since thread (0, 0, 0) initialised it: put a Barrier after the init; 127 such accesses at this site"]


def test_a_tma_store_writes_the_part_of_the_box_inside_the_tensor():
    x = torch.randn(16 * 64).bfloat16()
    arrays = {"x": x, "out": torch.zeros(512, dtype=torch.bfloat16), "y": torch.full((440,), 7.0).bfloat16()}
    assert not simulate(stored_back(), arrays).faults
    expected = torch.full((11, 40), 7.0).bfloat16()
    expected[5:11, 8:40] = x.view(16, 64)[0:6, 0:32]
    assert torch.equal(arrays["y"].view(11, 40), expected)


def test_a_tma_store_that_starts_before_the_tensor_is_a_fault_as_on_the_gpu():
    """A load's box may start at a negative coordinate; a store's stops the kernel on the H200."""
    x = torch.randn(16 * 64).bfloat16()
    arrays = {"x": x, "out": torch.zeros(512, dtype=torch.bfloat16), "y": torch.full((440,), 7.0).bfloat16()}
    report = simulate(stored_back(column=-8), arrays, raise_on_fault=False)
    assert report.out_of_bounds == [
        "kernel box_copy: `tma store y_map at (5, -8) <- tile[0][0]` by block (0, 0, 0) thread (0, 0, 0) stores a box "
        "from (5, -8): a TMA store's box may reach past the tensor's end but must start inside it (the GPU stops the "
        "kernel with an illegal instruction)"]
    assert torch.equal(arrays["y"], torch.full((440,), 7.0).bfloat16())


def test_writing_a_tma_store_source_before_its_wait_is_a_race_and_ending_without_one_a_fault():
    arrays = {"x": torch.randn(16 * 64).bfloat16(), "out": torch.zeros(512, dtype=torch.bfloat16),
              "y": torch.zeros(440, dtype=torch.bfloat16)}
    report = simulate(stored_back(overwrite=True), dict(arrays), raise_on_fault=False)
    assert report.races == ["kernel box_copy: tile[0][0] in block (0, 0, 0) written by thread (0, 0, 0) while `tma "
                            "store y_map at (5, 8) <- tile[0][0]` still reads it: wait for the store (TmaStoreWait) "
                            "before writing its source again"]
    report = simulate(stored_back(wait=False), dict(arrays), raise_on_fault=False)
    assert report.async_protocol[0].startswith("kernel box_copy: the kernel ends while `tma store y_map at (5, 8)")


def test_more_arrivals_than_a_phase_expects_are_a_fault():
    kernel = box_copy(16, 64, (8, 64), 0, 0)
    crowded = attrs.evolve(kernel, body=kernel.body + (kir.MbarrierArrive("full", (const(0),)),))
    _, report = run(crowded, torch.randn(16 * 64).bfloat16(), 512, False)
    assert report.async_protocol == ["kernel box_copy: 128 arrivals on mbarrier full[0] of block (0, 0, 0), whose "
                                     "phase waited for 1: a phase takes exactly the arrivals its init expects"]

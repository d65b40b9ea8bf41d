"""``Divergent``: groups of a block's threads that run one body at their own pace, waiting for
each other on mbarriers. The simulator runs each group as a task; CUDA prints the body once."""

from __future__ import annotations

import attrs
import pytest
import torch

from lamina.backends.cuda.codegen import emit_cuda, kernel_symbol
from lamina.backends.cuda.nvrtc import compile_kernel
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import Var, const, op

GROUP = 32


def taking_turns(groups: int = 2, first_turn: bool = True, count: int | None = None) -> kir.Kernel:
    """Each warp waits for its turn (the warp before it arrives on its barrier: the last one gives the
    first its turn), adds its number to its elements, then gives the next warp its turn."""
    tid, group = Var("tid"), Var("group")
    start = [kir.If(op("eq", group, groups - 1), [kir.MbarrierArrive("turn", (const(0),))])] if first_turn else []
    body = [
        kir.Declare("tid", dtypes.index, kir.thread_idx("x")),
        kir.Declare("group", dtypes.index, tid // GROUP),
        kir.If(op("lt", tid, groups), [kir.MbarrierInit("turn", (tid,), GROUP)]),
        kir.Barrier(),
        kir.Divergent(group, groups if count is None else count, [
            *start,
            kir.MbarrierWait("turn", (group,), const(0)),
            kir.Store("out", (tid,), kir.Load("x", (tid,), dtypes.float32) + group),
            kir.If(op("lt", group, groups - 1), [kir.MbarrierArrive("turn", (group + 1,))]),
        ]),
    ]
    threads = groups * GROUP
    return kir.Kernel(
        "taking_turns",
        [kir.Param("x", dtypes.float32, threads), kir.Param("out", dtypes.float32, threads, writable=True)],
        [kir.Array("turn", dtypes.int64, (groups,), "shared")], body, kir.Launch((1, 1, 1), (threads, 1, 1)))


@pytest.mark.parametrize("groups", [2, 3])
def test_groups_that_wait_for_each_other_run_as_tasks(groups):
    x = torch.randn(groups * GROUP)
    arrays = {"x": x, "out": torch.full_like(x, float("nan"))}
    assert not simulate(taking_turns(groups), arrays).faults
    assert torch.equal(arrays["out"], x + torch.arange(groups * GROUP) // GROUP)


def test_groups_that_never_get_a_turn_are_a_deadlock():
    x = torch.randn(2 * GROUP)
    with pytest.raises(SimulationError, match="deadlock"):
        simulate(taking_turns(first_turn=False), {"x": x, "out": torch.zeros_like(x)})


def test_a_thread_outside_the_groups_is_an_error():
    x = torch.randn(2 * GROUP)
    with pytest.raises(SimulationError, match=r"group group = 1 is outside 0\.\.0"):
        simulate(taking_turns(count=1), {"x": x, "out": torch.zeros_like(x)})


def test_printed_once_in_kernel_ir_and_cuda():
    kernel = taking_turns()
    assert "  each group of 2 at its own pace:\n    if group == 1:" in kir.format_kernel(kernel)
    source = emit_cuda(kernel)
    assert source.count("// each group of 2 at its own pace") == 1
    assert source.count("mbarrier.try_wait") == 1
    assert compile_kernel(source, kernel_symbol(kernel), "sm_90a").registers > 0


def test_the_verifier_wants_at_least_one_group():
    kernel = taking_turns()
    divergent = kernel.body[-1]
    broken = attrs.evolve(kernel, body=kernel.body[:-1] + (attrs.evolve(divergent, count=0),))
    with pytest.raises(VerificationError, match="divergent groups of group: 0; at least one"):
        kir.verify_kernel(broken)

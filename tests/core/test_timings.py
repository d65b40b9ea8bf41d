"""lamina.core.timings: where a compile's time goes, as the pipeline records it."""

import time

import torch

import lamina
from lamina.core.timings import Timings


def test_a_compile_records_each_stage_and_each_kernel():
    compiled = lamina.compile(lambda x, w: torch.relu(x @ w).sum(-1), (torch.randn(9, 20), torch.randn(20, 7)))
    timings = compiled.compilation.timings
    assert list(timings.stages)[:6] == ["capture", "decomposition", "lowering to loops", "fusion", "scheduling",
                                        "lowering to kernels"]
    assert all(seconds >= 0 for seconds in timings.stages.values()) and timings.stages["capture"] > 0
    assert set(timings.kernels) == {t.kernel.name for t in compiled.compilation.tiles}
    compiled.compilation.sources  # printed on demand, and timed then
    assert "CUDA printing" in timings.stages


def test_the_report_lists_stages_in_order_and_the_slowest_kernels_first():
    timings = Timings()
    timings.add("fusion", 3.0)
    timings.add("scheduling", 1.0)
    timings.add("fusion", 1.0)
    timings.add_first("capture", 4.0)
    for k in range(7):
        timings.add_kernel(f"kernel{k}", float(k))
    lines = timings.format().splitlines()
    assert lines[:5] == ["stage       seconds  share", "capture        4.00    44 %", "fusion         4.00    44 %",
                         "scheduling     1.00    11 %", "total          9.00"]
    assert lines[5] == "slowest kernels to schedule and lower (of 7):"
    assert lines[6:] == [f"  kernel{k}  {k}.00 s" for k in (6, 5, 4, 3, 2)]


def test_a_stage_timed_within_another_is_not_counted_twice():
    timings = Timings()
    with timings.stage("loading kernels"):
        time.sleep(0.01)
        with timings.stage("NVRTC"):
            time.sleep(0.1)
    assert timings.stages["NVRTC"] >= 0.1
    assert 0.01 <= timings.stages["loading kernels"] < 0.1
    assert timings.total == timings.stages["NVRTC"] + timings.stages["loading kernels"]

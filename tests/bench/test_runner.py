import math

import pytest
import torch

from lamina.bench import runner
from lamina.bench.runner import (SAME_SIZE_COPY, CaseResult, cold_set_count, copy_each, geomean_speedups, run_case,
                                 run_suite, same_size_pairs)
from lamina.bench.suite import make_case, measured_target
from lamina.core.errors import UnsupportedOpError
from lamina.program_spec import parse_input

from tests.bench.fakes import COLD_US, COPY_COLD_US, HOT_US, FakeTimer, no_torch_compile, tiny_cases


def test_cases_are_checked_then_timed_on_the_simulator():
    timer = FakeTimer()
    progress = []
    results = run_suite(tiny_cases(), device="cpu", timer=timer, torch_compile=no_torch_compile,
                        progress=lambda i, n, name: progress.append((i, n, name)), l2_bytes=2000)
    assert [r.status for r in results] == ["ok", "ok"]
    assert progress == [(0, 2, "tiny.rmsnorm"), (1, 2, "tiny.linear_qkv"), (2, 2, "")]
    for r in results:
        assert 0 < r.error < 1e-5 and r.tolerance == 1e-4
        assert r.times == HOT_US and r.hot_calls == runner.CALLS_PER_SHORT_GRAPH
        assert r.compile_seconds["lamina"] > 0 and "torch.compile" in r.compile_seconds
        assert r.speedup("eager") == 4.0 and r.speedup("torch.compile") == 2.0
    rmsnorm, linear = results
    assert rmsnorm.case.memory_bound and rmsnorm.cold_sets == 4 and rmsnorm.cold_times == COLD_US
    assert ("lamina", "cold", 4) in timer.calls
    assert rmsnorm.copy_cold_us == COPY_COLD_US and (SAME_SIZE_COPY, "cold", 4) in timer.calls
    assert linear.case.memory_bound and linear.cold_sets == 2  # 2 x 2112 bytes exceed twice the 2000-byte "L2"


def test_each_result_is_handed_on_as_soon_as_it_is_measured():
    seen = []
    run_suite(tiny_cases(), device="cpu", timer=FakeTimer(), torch_compile=no_torch_compile,
              measured=lambda results: seen.append([r.case.name for r in results]))
    assert seen == [["tiny.rmsnorm"], ["tiny.rmsnorm", "tiny.linear_qkv"]]


def test_long_calls_are_timed_one_per_graph():
    class SlowTimer(FakeTimer):
        def __call__(self, contender, figure, fn, inputs, calls):
            return 100 * super().__call__(contender, figure, fn, inputs, calls)

    case = make_case("tiny.dense", "x * 2.0", (parse_input("x=3,5"),), flops=10**6)
    timer = SlowTimer()
    result = run_case(case, device="cpu", timer=timer, torch_compile=no_torch_compile, l2_bytes=100)
    assert result.hot_calls == 1 and [calls for _, _, calls in timer.calls] == [1, 1, 1]


def test_compute_bound_cases_get_no_cold_figure():
    case = make_case("tiny.dense", "x * 2.0", (parse_input("x=3,5"),), flops=10**6)
    timer = FakeTimer()
    result = run_case(case, device="cpu", timer=timer, torch_compile=no_torch_compile, l2_bytes=100)
    assert not case.memory_bound and result.cold_times == {} and result.cold_sets == 0
    assert result.copy_cold_us is None
    assert [(figure, calls) for _, figure, calls in timer.calls] == [("hot", 1)] * 3 + [("hot", 20)] * 3


def test_cold_sets_exceed_l2():
    big = make_case("big", "x + 1", (parse_input("x=1024,1024"),))  # 8 MiB
    assert cold_set_count(big) * big.bytes_moved >= 2 * measured_target().l2_bytes
    huge = make_case("huge", "x + 1", (parse_input("x=8192,8192"),))
    assert cold_set_count(huge) == 2
    assert cold_set_count(make_case("small", "x + 1", (parse_input("x=4"),))) == 0


def test_each_cold_call_writes_its_own_output():
    """A result dropped at once would hand its buffer, still in L2, to the next call's stores."""
    class HoldingTimer(FakeTimer):
        def __init__(self):
            super().__init__()
            self.held = {}

        def __call__(self, contender, figure, fn, inputs, calls):
            if figure == "cold":
                self.held[contender] = fn(*inputs)
            return super().__call__(contender, figure, fn, inputs, calls)

    timer = HoldingTimer()
    rmsnorm = run_case(tiny_cases()[0], device="cpu", timer=timer, torch_compile=no_torch_compile, l2_bytes=2000)
    for contender in ("lamina", "eager", "torch.compile"):
        outputs = timer.held[contender]
        assert len(outputs) == rmsnorm.cold_sets == 4
        assert len({out.data_ptr() for out in outputs}) == 4
    assert not any(torch.equal(a, b) for a, b in zip(timer.held["lamina"], timer.held["lamina"][1:]))


def test_bfloat16_case_is_checked_against_float32():
    case = make_case("tiny.silu_mul.bf16", "F.silu(gate) * up",
                     (parse_input("gate=5,33:bfloat16"), parse_input("up=5,33:bfloat16")), 5 * 5 * 33)
    result = run_case(case, device="cpu", timer=FakeTimer(), torch_compile=no_torch_compile)
    assert result.status == "ok" and result.tolerance == 1e-2 and 0 < result.error < 1e-2


def test_a_wrong_result_is_not_timed(monkeypatch):
    real = runner.lamina.compile

    def off_by_a_bit(fn, inputs):
        compiled = real(fn, inputs)

        class Wrong:
            def __call__(self, *args):
                return compiled(*args) * 1.01
        return Wrong()

    monkeypatch.setattr(runner.lamina, "compile", off_by_a_bit)
    timer = FakeTimer()
    result = run_case(tiny_cases()[0], device="cpu", timer=timer, torch_compile=no_torch_compile)
    assert result.status == "mismatch" and "over 1e-04" in result.message and result.error == pytest.approx(0.01, rel=1e-3)
    assert timer.calls == [] and result.speedup("eager") is None


def test_a_case_lamina_cannot_compile_is_reported_and_the_run_goes_on(monkeypatch):
    def refuse(fn, inputs):
        raise UnsupportedOpError([("aten.fancy", "here")])

    monkeypatch.setattr(runner.lamina, "compile", refuse)
    result = run_case(tiny_cases()[0], device="cpu", timer=FakeTimer(), torch_compile=no_torch_compile)
    assert result.status == "failed" and result.message == "1 unsupported op(s) in the program:"


def _result(name, eager, compiled, lamina=1.0):
    case = make_case(name, "x + 1", (parse_input("x=4"),))
    return CaseResult(case, "ok", times={"lamina": lamina, "eager": eager, "torch.compile": compiled})


def test_geomean_speedup_per_contender():
    results = [_result("a", 2.0, 0.5), _result("b", 8.0, 2.0), CaseResult(tiny_cases()[0], "failed", "no")]
    means = geomean_speedups(results)
    assert means["eager"] == pytest.approx(4.0)
    assert means["torch.compile"] == pytest.approx(1.0)
    assert geomean_speedups(results, "cold") == {}
    assert math.isclose(geomean_speedups([_result("c", 3.0, 3.0, lamina=2.0)])["eager"], 1.5)


def test_the_same_size_copy_moves_the_cases_bytes_once_per_set():
    case = tiny_cases()[0]
    pairs = same_size_pairs(case, "cpu", 3)
    copy_each(pairs)()
    assert len(pairs) == 3
    for destination, source in pairs:
        assert torch.equal(destination, source)
        assert destination.nbytes + source.nbytes == case.bytes_moved // 8 * 8

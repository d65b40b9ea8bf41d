"""benchmarks/nonfinite_suite.py: the suite's small cases with NaN and infinities planted, on the simulator."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "nonfinite_suite.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("nonfinite_suite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_small_cases_keep_eagers_pattern_and_the_json_says_so(suite, tmp_path, capsys):
    out = tmp_path / "nonfinite.json"
    status = suite.main(["--device", "cpu", "--filter", "running_example", "--filter", "tinyllama.*.s1.*",
                         "--max-elements", "20000", "--out", str(out)])
    printed = capsys.readouterr().out
    record = json.loads(out.read_text())
    ran = [c for c in record["cases"] if c["status"] != "skipped"]
    assert status == 0 and record["mismatches"] == [], printed
    assert {c["case"] for c in ran} >= {"running_example.fp32", "running_example.bf16", "tinyllama.rmsnorm.s1.fp32"}
    assert "[1/" in printed and "same pattern" in printed and "skipped" in printed
    for case in ran:
        assert {p["kind"] for p in case["planted"]} == {"nan", "+inf", "-inf"}
        assert all(o["same_pattern"] for o in case["outputs"])
    example = next(c for c in ran if c["case"] == "running_example.fp32")
    counts = example["outputs"][0]["counts"]
    assert counts["nan"]["eager"] > 0
    assert all(v["lamina"] == v["eager"] for v in counts.values())


def test_a_different_pattern_is_a_mismatch(suite):
    want = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert suite.compare(want.clone(), want)["same_pattern"]
    for wrong in ([1.0, 0.0, float("inf"), -2.0], [1.0, float("nan"), float("-inf"), -2.0],
                  [float("nan"), float("nan"), float("inf"), -2.0]):
        result = suite.compare(torch.tensor(wrong), want)
        assert not result["same_pattern"] and result["differing"]
    assert suite.compare(torch.tensor([1.1, float("nan"), float("inf"), -2.0]), want)["relative_error"] > 0.04


def test_planted_inputs_hold_each_kind_at_its_recorded_position(suite):
    from lamina.bench.suite import builtin_suite

    case = next(c for c in builtin_suite() if c.name == "running_example.fp32")
    inputs, planted = suite.planted_inputs(case, "cpu", seed=0, count=2)
    by_name = dict(zip((s.name for s in case.inputs), inputs))
    assert len(planted) == 6 * sum(t.is_floating_point() for t in inputs)
    for p in planted:
        value = by_name[p["input"]].reshape(-1)[p["position"]]
        assert {"nan": torch.isnan, "+inf": torch.isposinf, "-inf": torch.isneginf}[p["kind"]](value)

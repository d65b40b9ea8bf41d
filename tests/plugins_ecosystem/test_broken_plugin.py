"""The conformance kit reports each fault of the broken plugin precisely, by stable test id."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITES = Path(__file__).with_name("broken_plugin_conformance.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "summary.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "lamina.testing.conformance",
         str(SUITES), "--lamina-json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.exists(), run.stdout + run.stderr
    suites = {Path(s["suite"]).name: s for s in json.loads(out.read_text())["suites"]}
    return run, {name: {t["id"]: t for t in s["tests"]} for name, s in suites.items()}


def results_of(report, suite):
    return report[1][f"broken_plugin_conformance.py::{suite}"]


def test_the_run_fails(report):
    run, _ = report
    assert run.returncode == 1, run.stdout + run.stderr
    assert "lamina conformance" in run.stdout


def test_the_plugin_itself_loads_cleanly(report):
    tests = results_of(report, "TestBrokenOps")
    assert tests["plugin=broken|check=hook_specs"]["outcome"] == "passed"


def test_wrong_numerics_are_reported_per_dtype_case_and_engine(report):
    tests = results_of(report, "TestBrokenOps")
    interpreted = tests["op=aten.expm1.default|dtype=f32|case=ragged"]
    simulated = tests["op=aten.expm1.default|dtype=f32|case=ragged|via=simulator"]
    assert interpreted["outcome"] == simulated["outcome"] == "failed"
    assert "aten.expm1.default on ragged (f32), Tensor IR interpreter" in interpreted["reason"]
    assert "relative error" in interpreted["reason"]
    assert "compiled, on the Kernel IR simulator" in simulated["reason"]


def test_a_non_primitive_left_in_tensor_ir_is_named(report):
    tests = results_of(report, "TestBrokenOps")
    failed = tests["op=aten.sign.default|dtype=f32|case=ragged"]
    assert failed["outcome"] == "failed"
    assert "a Sign is not a Tensor IR primitive" in failed["reason"]
    assert "relative error" not in failed["reason"]


def test_undeclared_dtypes_are_skips_with_a_reason(report):
    skipped = results_of(report, "TestBrokenOps")["op=aten.expm1.default|dtype=bf16|case=ragged"]
    assert skipped["outcome"] == "skipped"
    assert "not among the declared capabilities" in skipped["reason"]


def test_known_failures_are_expected_and_an_unexpected_pass_is_reported(report):
    tests = results_of(report, "TestBrokenOpsWithKnownFailures")
    for test_id in ("op=aten.expm1.default|dtype=f32|case=ragged", "op=aten.sign.default|dtype=f32|case=ragged|via=simulator"):
        assert tests[test_id]["outcome"] == "xfailed"
    assert tests["plugin=broken|check=hook_specs"]["outcome"] == "xpassed"


def test_an_out_of_bounds_schedule_is_caught_by_the_simulator(report):
    tests = results_of(report, "TestBrokenSchedule")
    failed = tests["schedule=unguarded|program=elementwise|check=out_of_bounds"]
    assert failed["outcome"] == "failed"
    assert "outside [0, 132)" in failed["reason"]
    assert tests["schedule=unguarded|program=elementwise|check=races"]["outcome"] == "passed"


def test_a_program_the_schedule_does_not_apply_to_is_a_skip(report):
    skipped = results_of(report, "TestBrokenSchedule")["schedule=unguarded|program=row_sum|check=numerics"]
    assert skipped["outcome"] == "skipped"
    assert "applies to no kernel of program row_sum" in skipped["reason"]


def test_a_policy_choosing_no_candidate_fails_and_its_programs_do_not_compile(report):
    tests = results_of(report, "TestBrokenPolicies")
    failed = tests["policy=own_generic|program=elementwise|check=chooses_a_candidate"]
    assert failed["outcome"] == "failed"
    assert "choose returned schedule generic, not one of" in failed["reason"]
    assert tests["policy=own_generic|program=elementwise|check=deterministic"]["outcome"] == "passed"
    compiled = tests["policy=own_generic|program=elementwise|check=numerics"]
    assert compiled["outcome"] == "failed" and "the compile failed" in compiled["reason"]


def test_a_selection_pinning_undeclared_knobs_is_reported(report):
    tests = results_of(report, "TestBrokenPolicies")
    failed = tests["policy=undeclared_knob|program=matmul|check=chooses_a_candidate"]
    assert failed["outcome"] == "failed"
    assert "pins knobs ['no_such_knob']" in failed["reason"]
    assert "select's note is 3, not a str or None" in failed["reason"]
    assert tests["policy=undeclared_knob|program=matmul|check=deterministic"]["outcome"] == "passed"
    compiled = tests["policy=undeclared_knob|program=matmul|check=numerics"]
    assert compiled["outcome"] == "failed" and "the compile failed" in compiled["reason"]
    assert "policy=undeclared_knob|check=cache_key" not in tests

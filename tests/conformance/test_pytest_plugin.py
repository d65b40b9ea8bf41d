"""The pytest plugin: known failures as strict xfails, skips with reasons, the summary and its JSON."""

from __future__ import annotations

import json
import textwrap
import tomllib
from pathlib import Path

import pytest

SUITES = '''
from lamina.testing import Capabilities, OpPluginSuite
from tests.conformance import broken_plugins

class TestBrokenExp(OpPluginSuite):
    plugin = broken_plugins.BROKEN_OPS
    plugin_name = "broken-ops"
    ops = ("aten.exp.default",)
    known_failures = ["op=aten.exp.default|dtype=f32|case=ragged"]

class TestCorrectExp(OpPluginSuite):
    plugin = broken_plugins.CORRECT_EXP
    plugin_name = "correct-exp"
    capabilities = Capabilities(dtypes=("f32", "f64"))
    known_failures = ["op=aten.exp.default|dtype=f64|case=scalar"]
'''


@pytest.fixture(scope="module")
def conformance_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance-run")
    (folder / "test_suites.py").write_text(textwrap.dedent(SUITES))
    (folder / "pytest.ini").write_text("[pytest]\n")
    report = folder / "summary.json"
    code = pytest.main([str(folder), "-q", "-p", "no:cacheprovider", "-p", "lamina.testing.conformance",
                        "-c", str(folder / "pytest.ini"), "--rootdir", str(folder), "--lamina-json", str(report)])
    outcomes = {}
    for suite in json.loads(report.read_text())["suites"]:
        outcomes.update({(suite["plugin"], test["id"]): test for test in suite["tests"]})
    return code, outcomes, json.loads(report.read_text())


def test_a_listed_failure_that_fails_is_an_expected_failure(conformance_run):
    _, outcomes, _ = conformance_run
    assert outcomes["broken-ops", "op=aten.exp.default|dtype=f32|case=ragged"]["outcome"] == "xfailed"


def test_an_unlisted_failure_fails_with_its_reason(conformance_run):
    code, outcomes, _ = conformance_run
    failed = outcomes["broken-ops", "op=aten.exp.default|dtype=f32|case=scalar"]
    assert failed["outcome"] == "failed" and "relative error" in failed["reason"]
    assert code == pytest.ExitCode.TESTS_FAILED


def test_a_listed_failure_that_passes_is_reported(conformance_run):
    _, outcomes, _ = conformance_run
    assert outcomes["correct-exp", "op=aten.exp.default|dtype=f64|case=scalar"]["outcome"] == "xpassed"
    assert outcomes["correct-exp", "op=aten.exp.default|dtype=f32|case=scalar"]["outcome"] == "passed"


def test_undeclared_capabilities_are_skipped_with_a_reason(conformance_run):
    _, outcomes, _ = conformance_run
    skipped = outcomes["correct-exp", "op=aten.exp.default|dtype=bf16|case=ragged"]
    assert skipped["outcome"] == "skipped" and "bf16" in skipped["reason"]


def test_the_summary_counts_outcomes_per_subject(conformance_run):
    _, _, summary = conformance_run
    correct = next(s for s in summary["suites"] if s["plugin"] == "correct-exp")
    counts = correct["subjects"]["op=aten.exp.default"]
    assert counts["xpassed"] == 1 and counts["skipped"] > 0 and counts["passed"] > 0 and counts["failed"] == 0
    assert correct["kind"] == "op"


def test_installing_lamina_adds_no_tests_to_other_runs():
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    assert "pytest11" not in project.get("entry-points", {})

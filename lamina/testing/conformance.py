"""The pytest plugin of the conformance kit: ``pytest -p lamina.testing.conformance``.

It is opt-in (lamina declares no ``pytest11`` entry point), so installing lamina adds no
tests to other projects' runs. It parametrizes every conformance suite's
``test_conformance`` with the suite's checks, turns ``known_failures`` into strict
xfails, skips GPU checks without a GPU, and ends the run with a summary per subject;
``--lamina-json PATH`` writes that summary to a file. Without ``-v`` the summary lists
only the subjects where something failed (or failed as expected), or nothing passed.
"""

from __future__ import annotations

import pytest
import torch

from lamina.testing.suite import PluginSuite, context_of
from lamina.testing.summary import Result, Summary


def pytest_addoption(parser) -> None:
    group = parser.getgroup("lamina", "lamina conformance kit")
    group.addoption("--lamina-json", metavar="PATH", default=None,
                    help="write the conformance summary (per suite and subject, every test id and outcome) as JSON")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped where PyTorch sees none")
    config.pluginmanager.register(ConformanceRecorder(config), "lamina-conformance-recorder")


def pytest_generate_tests(metafunc) -> None:
    suite = metafunc.cls
    if suite is None or not issubclass(suite, PluginSuite) or "lamina_check" not in metafunc.fixturenames:
        return
    known = set(suite.known_failures)
    params = []
    for check in suite.conformance_checks():
        marks = []
        if check.needs_gpu:
            marks.append(pytest.mark.gpu)
            if not torch.cuda.is_available():
                marks.append(pytest.mark.skip(reason="no CUDA GPU is visible to PyTorch"))
        if check.skip:
            marks.append(pytest.mark.skip(reason=check.skip))
        if check.id in known:
            marks.append(pytest.mark.xfail(strict=True, reason=f"listed in {suite.__name__}.known_failures"))
        params.append(pytest.param(check, id=check.id, marks=marks))
    metafunc.parametrize("lamina_check", params)


def _outcome(report) -> str | None:
    if report.when == "call" or report.failed or report.skipped:
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed"
        if report.failed and "XPASS(strict)" in str(report.longrepr):
            return "xpassed"
        return report.outcome
    return None


def _reason(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        return crash.message if crash is not None else str(report.longrepr).splitlines()[-1]
    return ""


class ConformanceRecorder:
    """Remembers which test is which check, records each outcome, and prints the summary."""

    def __init__(self, config):
        self.config = config
        self.summary = Summary()
        self.checks: dict[str, tuple] = {}

    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            callspec = getattr(item, "callspec", None)
            if callspec is None or "lamina_check" not in callspec.params or item.cls is None:
                continue
            suite = item.nodeid.split("::test_conformance")[0]
            self.checks[item.nodeid] = (suite, context_of(item.cls).name, item.cls.kind, callspec.params["lamina_check"])

    def pytest_runtest_logreport(self, report) -> None:
        found = self.checks.get(report.nodeid)
        outcome = _outcome(report)
        if found is None or outcome is None:
            return
        suite, plugin, kind, check = found
        self.summary.record(report.nodeid, Result(suite, plugin, kind, check.subject, check.id, outcome, _reason(report)))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.summary.results:
            return
        terminalreporter.section("lamina conformance")
        for line in self.summary.lines(every_subject=self.config.get_verbosity() > 0):
            terminalreporter.write_line(line)
        path = self.config.getoption("--lamina-json")
        if path:
            self.summary.write(path)
            terminalreporter.write_line(f"summary written to {path}")

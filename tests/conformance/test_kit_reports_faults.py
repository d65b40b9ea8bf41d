"""The conformance kit reports each fault of a broken plugin precisely, and only there."""

from __future__ import annotations

import pytest

from lamina.testing import OpPluginSuite, SchedulePluginSuite
from tests.conformance import broken_plugins


class BrokenOpsSuite(OpPluginSuite):
    plugin = broken_plugins.BROKEN_OPS
    plugin_name = "broken-ops"


class UnguardedSuite(SchedulePluginSuite):
    plugin = broken_plugins.UNGUARDED_SCHEDULES
    plugin_name = "unguarded"
    programs = ("elementwise", "matmul")


def run(suite, check_id: str) -> None:
    checks = {c.id: c for c in suite.conformance_checks()}
    assert check_id in checks, f"no check {check_id}; the suite has {sorted(checks)[:10]}..."
    checks[check_id].run()


def test_wrong_numerics_are_a_failure_naming_op_case_and_error():
    with pytest.raises(AssertionError, match=r"aten.exp.default on ragged \(f32\), Tensor IR interpreter.*relative error"):
        run(BrokenOpsSuite, "op=aten.exp.default|dtype=f32|case=ragged")


def test_wrong_numerics_are_caught_on_the_simulator_too():
    with pytest.raises(AssertionError, match="Kernel IR simulator"):
        run(BrokenOpsSuite, "op=aten.exp.default|dtype=f32|case=ragged|via=simulator")


def test_an_unknown_scalar_op_left_in_tensor_ir_is_reported():
    with pytest.raises(Exception, match="mish"):
        run(BrokenOpsSuite, "op=aten.neg.default|dtype=f32|case=ragged")


def test_undeclared_dtypes_are_skips_with_a_reason():
    check = next(c for c in BrokenOpsSuite.conformance_checks() if c.id == "op=aten.exp.default|dtype=bf16|case=ragged")
    assert check.skip is not None and "bf16" in check.skip and "Capabilities" in check.skip


def test_a_plugin_not_installed_as_an_entry_point_skips_that_check():
    check = next(c for c in BrokenOpsSuite.conformance_checks() if c.id == "plugin=broken-ops|check=entry_point")
    assert "not installed as an entry point" in check.skip


def test_out_of_bounds_schedule_is_reported_by_the_simulator():
    with pytest.raises(AssertionError, match="out of bounds"):
        run(UnguardedSuite, "schedule=unguarded|program=elementwise|check=out_of_bounds")


def test_a_plugin_keeping_state_between_registrations_is_reported():
    class Stateful(OpPluginSuite):
        plugin = broken_plugins.STATEFUL_OPS
        plugin_name = "stateful"

    with pytest.raises(AssertionError, match="keeps state between registrations"):
        run(Stateful, "plugin=stateful|check=no_leftover_state")


def test_a_misspelled_hook_fails_validation_with_a_hint():
    class Misspelled(OpPluginSuite):
        plugin = broken_plugins.MISSPELLED_HOOK
        plugin_name = "misspelled"

    checks = {c.id for c in Misspelled.conformance_checks()}
    assert not any(i.startswith("op=") for i in checks)
    with pytest.raises(AssertionError, match="did you mean lamina_register_ops"):
        run(Misspelled, "plugin=misspelled|check=hook_specs")


def test_stale_known_failures_are_reported():
    class Stale(BrokenOpsSuite):
        known_failures = ["op=aten.exp.default|dtype=f32|case=no_such_case"]

    with pytest.raises(AssertionError, match="no_such_case"):
        run(Stale, "plugin=broken-ops|check=known_failures")

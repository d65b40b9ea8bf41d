"""The conformance suite for op plugins (decompositions of ATen ops into Tensor IR).

For every op the plugin registers and every sample of it in the case database (or in
the suite's ``cases``), in every dtype the op and the plugin support:

- ``op=X|dtype=D|case=C``: the decomposition verifies, leaves only the three
  primitives with lamina's scalar ops, and the Tensor IR interpreter computes what
  the ATen op computes;
- ``...|via=simulator``: for the ``compiled`` samples, in ``compiled_dtypes``, the whole
  compiler runs it on the Kernel IR simulator;
- ``...|via=gpu``: the same on the GPU, when there is one.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Mapping, Sequence

import pytest
import torch

from lamina.backends.reference.interpreter import interpret
from lamina.core.ir import tensor_ir
from lamina.core.registry import Registry
from lamina.core.stages.decompose import decompose
from lamina.testing.cases.database import OpCases, as_op_cases, cases_for
from lamina.testing.cases.samples import Case
from lamina.testing.check import Check, check_id
from lamina.testing.compiled_run import compile_graph, run_compiled
from lamina.testing.numerics import assert_close
from lamina.testing.op_graph import GraphSample, build_sample
from lamina.testing.plugin_loading import focused_registry, load, provided
from lamina.testing.primitives import check_primitives
from lamina.testing.suite import PluginSuite, SuiteContext, context_of


def decompositions(registry: Registry) -> dict[str, Any]:
    return {name: registry.get("op", name).provider for name in registry.names("op")}


class OpPluginSuite(PluginSuite):
    """Checks a plugin that implements ``lamina_register_ops``."""

    kind = "op"
    #: The ops to check; by default every op the plugin registers.
    ops: ClassVar[Sequence[str] | None] = None
    #: Cases for ops the database lacks, or replacing its cases: op -> [Case, ...] or OpCases.
    cases: ClassVar[Mapping[str, Any]] = {}
    #: Dtypes in which the compiled samples also run through the whole compiler.
    compiled_dtypes: ClassVar[Sequence[str]] = ("f32",)

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        registered = provided(context.manager, context.name, "op")
        ops = cls.ops if cls.ops is not None else registered
        ordered = functools.partial(registration_order_programs, cls, [op for op in ops if op in registered])
        checks = [Check(check_id(plugin=context.name, check="registration_order_programs"), context.subject, ordered)]
        for op in ops:
            entry = as_op_cases(op, cls.cases[op]) if op in cls.cases else cases_for(op)
            checks += _op_checks(cls, context, op, entry, op in registered)
        return checks


@functools.cache
def _registry(suite: type[OpPluginSuite], first: bool = False) -> Registry:
    context = context_of(suite)
    manager = load(context.plugin, context.name, first=first) if first else context.manager
    return focused_registry(manager, context.name, "op")


def _op_checks(suite, context: SuiteContext, op: str, entry: OpCases | None, registered: bool) -> list[Check]:
    subject = f"op={op}"
    if not registered:
        def missing() -> None:
            raise AssertionError(f"{context.name} does not register {op}, which the suite's ops list")

        return [Check(check_id(op=op, check="registered"), subject, missing)]
    if entry is None:
        reason = (f"the case database has no samples of {op}: add some with "
                  f"lamina.testing.register_cases({op!r}, [...]) or the suite's cases attribute")
        return [Check(check_id(op=op, check="cases"), subject, lambda: None, skip=reason)]
    checks = []
    for case in entry.cases:
        for dtype in entry.dtypes_of(case):
            skip = context.capabilities.missing_dtype(dtype)
            base = dict(op=op, dtype=dtype, case=case.name)
            checks.append(Check(check_id(**base), subject,
                                functools.partial(_interpreted, suite, entry, case, dtype), skip=skip))
            if not case.compiled or dtype not in suite.compiled_dtypes:
                continue
            simulated = None if not context.capabilities.needs_gpu else "the plugin declares needs_gpu"
            checks.append(Check(check_id(**base, via="simulator"), subject,
                                functools.partial(_compiled, suite, entry, case, dtype, "cpu"), skip=skip or simulated))
            checks.append(Check(check_id(**base, via="gpu"), subject,
                                functools.partial(_compiled, suite, entry, case, dtype, "cuda"), skip=skip, needs_gpu=True))
    return checks


def _sample(entry: OpCases, case: Case, dtype: str) -> GraphSample:
    return build_sample(entry.op, case, dtype, entry.computation())


def _tensor_program(registry: Registry, sample: GraphSample) -> tensor_ir.Program:
    program = decompose(sample.graph, decompositions(registry))
    tensor_ir.verify_program(program)
    check_primitives(program)
    return program


def _interpreted(suite, entry: OpCases, case: Case, dtype: str) -> None:
    sample = _sample(entry, case, dtype)
    program = _tensor_program(_registry(suite), sample)
    actual = interpret(program, {v.name: t for v, t in zip(program.inputs, sample.inputs)})
    assert_close(actual, sample.expected, f"{entry.op} on {case.name} ({dtype}), Tensor IR interpreter", entry.tolerance)


def _compiled(suite, entry: OpCases, case: Case, dtype: str, device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU is visible to PyTorch")
    registry = _registry(suite)
    sample = _sample(entry, case, dtype)
    compilation = compile_graph(sample.graph, registry)
    backend = "cuda" if device == "cuda" else "reference"
    actual = run_compiled(compilation, registry, backend, sample.inputs, device)
    where = "the GPU" if device == "cuda" else "the Kernel IR simulator"
    assert_close(actual, sample.expected, f"{entry.op} on {case.name} ({dtype}), compiled, on {where}", entry.tolerance)


def registration_order_programs(suite: type[OpPluginSuite], ops: Sequence[str]) -> None:
    """Each op decomposes to the same Tensor IR whether the plugin loads before or after the built-ins."""
    for op in ops:
        entry = as_op_cases(op, suite.cases[op]) if op in suite.cases else cases_for(op)
        if entry is None or not entry.cases:
            continue
        case = entry.cases[0]
        sample = _sample(entry, case, entry.dtypes_of(case)[0])
        after = tensor_ir.format_program(_tensor_program(_registry(suite), sample))
        before = tensor_ir.format_program(_tensor_program(_registry(suite, first=True), sample))
        if after != before:
            raise AssertionError(f"{op} decomposes differently when the plugin loads before the built-ins:\n"
                                 f"{after}\n---\n{before}")

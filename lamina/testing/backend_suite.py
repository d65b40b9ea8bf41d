"""The conformance suite for backend plugins.

Every representative program is compiled with the built-in stages and run by each
backend the plugin registers, on the device the backend needs (the GPU when the
plugin declares ``needs_gpu``). For each ``backend=B``:

- ``check=available``: ``available()`` answers None or a sentence;
- ``program=P|check=emit``: ``emit`` gives None or source text for every kernel;
- ``program=P|check=numerics``: the backend's results against PyTorch.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Sequence

import pytest
import torch

from lamina.testing.check import Check, check_id
from lamina.testing.compiled_run import compile_graph, run_compiled
from lamina.testing.numerics import assert_close
from lamina.testing.plugin_loading import focused_registry, provided
from lamina.testing.programs import PROGRAMS, build_program
from lamina.testing.suite import PluginSuite, SuiteContext, context_of


class BackendPluginSuite(PluginSuite):
    """Checks a plugin that implements ``lamina_register_backends``."""

    kind = "backend"
    #: The backends to check; by default every backend the plugin registers.
    backends: ClassVar[Sequence[str] | None] = None
    #: The representative programs to run (names of ``lamina.testing.programs.PROGRAMS``).
    programs: ClassVar[Sequence[str]] = tuple(PROGRAMS)

    @classmethod
    def plugin_checks(cls, context: SuiteContext) -> list[Check]:
        names = cls.backends if cls.backends is not None else provided(context.manager, context.name, "backend")
        gpu = context.capabilities.needs_gpu
        checks = []
        for backend in names:
            subject = f"backend={backend}"
            checks.append(Check(check_id(backend=backend, check="available"), subject,
                                functools.partial(_available, cls, backend)))
            for program in cls.programs:
                for check in ("emit", "numerics"):
                    run = functools.partial(_check, cls, backend, program, check)
                    checks.append(Check(check_id(backend=backend, program=program, check=check), subject, run,
                                        needs_gpu=gpu and check == "numerics"))
        return checks


def _provider(suite, backend: str):
    context = context_of(suite)
    return context.manager.registry.get("backend", backend, plugin=context.name).provider


def _available(suite, backend: str) -> None:
    reason = _provider(suite, backend).available()
    assert reason is None or (isinstance(reason, str) and reason), (
        f"backend {backend}: available() must return None or a sentence saying why not, not {reason!r}")


def _check(suite, backend: str, program: str, check: str) -> None:
    context = context_of(suite)
    registry = focused_registry(context.manager, context.name, "backend")
    sample = build_program(program)
    compilation = compile_graph(sample.graph, registry)
    provider = registry.get("backend", backend).provider
    if check == "emit":
        sources = provider.emit(compilation.kernels, compilation.target)
        if sources is not None:
            missing = [k.name for k in compilation.kernels.kernels if not isinstance(sources.get(k.name), str)]
            assert not missing, f"backend {backend}: emit gives no source text for kernels {missing}"
        return
    device = "cuda" if context.capabilities.needs_gpu else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU is visible to PyTorch")
    actual = run_compiled(compilation, registry, backend, sample.inputs, device)
    assert_close(actual, sample.expected, f"program {program} on backend {backend}")

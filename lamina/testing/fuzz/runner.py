"""Running a fuzzed program compiled and eagerly, and judging the difference.

Floats are compared with eager PyTorch in float64 on the same inputs. The error is the
largest difference relative to the largest magnitude of the expected result (or absolute
below magnitude 1). It may be at most ``MARGIN`` times eager PyTorch's own error in the
program's dtype, and never needs to be below ``FLOOR``: a program that loses precision in
eager bf16 may lose as much compiled, and a kernel's rounding in another order is allowed.
Integers and indices must be equal to eager's.
"""

from __future__ import annotations

import time
import traceback
from typing import Sequence

import attrs
import torch

import lamina
from lamina.core.errors import ScheduleError
from lamina.testing.fuzz.generator import generate
from lamina.testing.fuzz.program import Program

FLOOR = {torch.float32: 1e-4, torch.bfloat16: 1e-2}
MARGIN = 2.0

OUTCOMES = ("passed", "mismatched", "crashed", "refused", "invalid")
"""``refused``: a ScheduleError; ``invalid``: eager PyTorch itself fails, a fault of the generator."""


@attrs.frozen
class Outcome:
    program: Program
    kind: str
    #: Why it failed: the difference, or the error's last lines; empty when it passed.
    detail: str = ""
    seconds: float = 0.0


def _flat(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    a, b = actual.double(), expected.double()
    if a.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(a).all()):
        return float("inf")
    scale = max(float(b.abs().max()), 1.0)
    return float((a - b).abs().max()) / scale


def judge(actual: Sequence[torch.Tensor], eager: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> str:
    """Why ``actual`` (compiled) is wrong, or ``""``; ``eager`` ran in the program's dtype,
    ``reference`` in float64."""
    if len(actual) != len(eager):
        return f"{len(actual)} result(s), eager PyTorch gives {len(eager)}"
    for k, (got, want, exact) in enumerate(zip(actual, eager, reference)):
        got = got.detach().cpu()
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            return f"result {k}: lamina gives {got.dtype}{list(got.shape)}, eager {want.dtype}{list(want.shape)}"
        if not want.dtype.is_floating_point:
            if not torch.equal(got, want):
                wrong = int((got != want).sum())
                return f"result {k}: {wrong} of {want.numel()} values differ from eager PyTorch"
            continue
        error, eager_error = _error(got, exact), _error(want, exact)
        allowed = max(FLOOR[want.dtype], MARGIN * eager_error)
        if not error <= allowed:
            return (f"result {k}: relative error {error:.3g} against float64, allowed {allowed:.3g} "
                    f"(eager {want.dtype} has {eager_error:.3g})")
    return ""


def _float64(inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(t.double() if t.is_floating_point() else t for t in inputs)


def _last_lines(error: BaseException, count: int = 6) -> str:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    text = "".join(lines[-count:]).strip()
    return text if len(text) < 4000 else text[-4000:]


def run(program: Program) -> Outcome:
    """Compile and run ``program`` on the CPU (the simulator) and judge it against eager PyTorch."""
    started = time.perf_counter()

    def outcome(kind: str, detail: str = "") -> Outcome:
        return Outcome(program, kind, detail, time.perf_counter() - started)

    try:
        function, inputs = program.function(), program.inputs()
        with torch.no_grad():
            eager = _flat(function(*inputs))
            reference = _flat(function(*_float64(inputs))) if program.dtype != "int32" else eager
    except Exception as error:  # noqa: BLE001 - any failure of eager PyTorch is the generator's fault
        return outcome("invalid", _last_lines(error))
    try:
        compiled = lamina.compile(function, inputs)
        actual = _flat(compiled(*inputs))
    except ScheduleError as error:
        return outcome("refused", _last_lines(error))
    except Exception as error:  # noqa: BLE001 - every other failure is a crash to report
        return outcome("crashed", _last_lines(error))
    difference = judge(actual, eager, reference)
    return outcome("mismatched", difference) if difference else outcome("passed")


def run_seed(task: tuple[int, str | None]) -> Outcome:
    """``run`` of the program of ``(seed, dtype)``: what a worker process is given."""
    seed, dtype = task
    return run(generate(seed, dtype))


def single_thread() -> None:
    """A worker's PyTorch uses one thread: the workers share the machine's cores."""
    torch.set_num_threads(1)

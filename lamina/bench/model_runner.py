"""One case of the whole-model suite: prefill of a model called as its users call it,
``model(**inputs)``, through lamina (``torch.compile(model, backend="lamina")``), eager
PyTorch and torch.compile's Inductor, in this one process on the same inputs
(PERFORMANCE.md's method).

The instruments (the two clocks, the kernel counter, the memory probe) and the compilers
are parameters, so that everything but the GPU's own instruments runs on the CPU in the
tests, lamina's compile through ``torch.compile`` on the simulator included.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import statistics
import tempfile
import time
import traceback
from typing import Any, Callable, ContextManager, Iterator, Protocol

import attrs
import torch

from lamina.bench.measure import relative_error, samples_within, time_cuda_graph
from lamina.bench.model_suite import ModelCase
from lamina.bench.runner import CONTENDERS
from lamina.core.errors import LaminaError
from lamina.models.architectures import main_output
from lamina.models.layer_counts import cuda_kernels_per_call
from lamina.models.measure import eager_at, peak_memory, reference_dtype

FIGURES = {"graph_us": "CUDA-graph replay", "calls_us": "plain calls"}
"""The two times of a case, in microseconds per call: device time, and what a user waits for."""
MEASUREMENTS = (*FIGURES, "kernels", "kernels_per_layer", "peak_bytes")
PLAIN_CALLS = 30
LONG_CALL_BUDGET_S = 5.0
"""Seconds of calls that one figure of one contender may take: a call so long that the wanted number of samples
would take longer is timed fewer times (``samples_within``)."""
FP32_TOLERANCE = 1e-4
BF16_ERROR_RATIO = 1.25
"""A bfloat16 model may be this many times as far from float32 as eager bfloat16 is."""
SEED = 0

Call = Callable[[], Any]


class Timer(Protocol):
    def __call__(self, contender: str, figure: str, call: Call) -> float:
        """Microseconds per ``call()``, ``figure`` being one of ``FIGURES``."""


@attrs.frozen
class Instruments:
    """What a case is measured with: the GPU's (``gpu_instruments``), or stand-ins in the tests."""

    timer: Timer
    #: (contender, call) -> CUDA kernels that one call launches.
    count_kernels: Callable[[str, Call], int]
    #: (contender, call) -> bytes allocated at the peak of one call, above what was allocated before it.
    peak_memory: Callable[[str, Call], int]
    synchronize: Callable[[], None]
    #: The GPU to this process alone, for the GPU work between measurements (``gpu_instruments``).
    turn: Callable[[], ContextManager] = contextlib.nullcontext


def plain_call_us(call: Call, calls: int, synchronize: Callable[[], None], warmup: int = 3,
                  budget_s: float | None = None) -> float:
    """Median wall time in microseconds of ``calls`` calls, each waited for: what a user sees, host overhead
    included; with ``budget_s``, fewer calls (at least 3) where ``calls`` of them would take longer."""
    start = time.perf_counter()
    call()
    synchronize()
    seconds = time.perf_counter() - start
    for _ in range(samples_within(warmup - 1, seconds, budget_s, 0)):
        call()
    synchronize()
    times = []
    for _ in range(samples_within(calls, seconds, budget_s, 3)):
        start = time.perf_counter()
        call()
        synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


_held: dict[str, int] = {}
"""How deep each lock file is held by this process: ``exclusive`` is re-entrant, so that a compiled graph that
takes its turn (``taking_turns``) can run inside a measurement that holds it already."""


@contextlib.contextmanager
def exclusive(lock: str | None) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (none when None) within the block.

    Several bench processes can then share one GPU: each compiles while the others do
    (compiling is host work), and only one at a time measures or runs anything on the GPU,
    so that no timing, kernel count or memory peak ever sees another process's work."""
    if lock is None or _held.get(lock, 0):
        if lock is not None:
            _held[lock] += 1
        try:
            yield
        finally:
            if lock is not None:
                _held[lock] -= 1
        return
    import fcntl

    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _held[lock] = 1
        try:
            yield
        finally:
            _held[lock] = 0
            fcntl.flock(handle, fcntl.LOCK_UN)


def gpu_instruments(replays: int, lock: str | None = None, budget_s: float | None = LONG_CALL_BUDGET_S) -> Instruments:
    """The GPU's clocks, kernel counter and memory probe; with ``lock``, each measurement holds it (``exclusive``),
    and so does ``turn``, for the GPU work between measurements."""
    def timer(contender: str, figure: str, call: Call) -> float:
        with exclusive(lock):
            if figure == "graph_us":
                return time_cuda_graph(call, (), replays=replays, budget_s=budget_s)
            return plain_call_us(call, PLAIN_CALLS, torch.cuda.synchronize, budget_s=budget_s)

    def memory(contender: str, call: Call) -> int:
        with exclusive(lock):
            return peak_memory(lambda _: call(), None)[1].above_before

    def count_kernels(contender: str, call: Call) -> int:
        with exclusive(lock):
            return cuda_kernels_per_call(call, ())

    return Instruments(timer=timer, count_kernels=count_kernels, peak_memory=memory,
                       synchronize=torch.cuda.synchronize, turn=lambda: exclusive(lock))


def taking_turns(backend: str, turn: Callable[[], ContextManager]) -> Callable:
    """A torch.compile backend that compiles each graph as ``backend`` does and runs it within ``turn()``: the
    first call of a compiled model, which compiles on the host for a minute and then runs on the GPU, then holds
    the GPU for its run alone and not for its compile."""
    compile_with = torch._dynamo.lookup_backend(backend)

    def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: list) -> Callable:
        compiled = compile_with(graph_module, example_inputs)

        def run(*args):
            with turn():
                return compiled(*args)
        return run
    return compile_graph


def lamina_compile(model: torch.nn.Module, turn: Callable[[], ContextManager] | None = None) -> Callable:
    return torch.compile(model, backend="lamina" if turn is None else taking_turns("lamina", turn), dynamic=False)


def inductor_compile(model: torch.nn.Module, turn: Callable[[], ContextManager] | None = None) -> Callable:
    return torch.compile(model, dynamic=False, **({} if turn is None else {"backend": taking_turns("inductor", turn)}))


@attrs.frozen
class Compilers:
    """How the compiled contenders are made from a model; tests stand in for Inductor, which takes minutes on
    the CPU."""

    lamina: Callable[[torch.nn.Module], Callable] = lamina_compile
    torch_compile: Callable[[torch.nn.Module], Callable] | None = inductor_compile
    """None leaves torch.compile out (``--no-torch-compile``)."""


@attrs.frozen
class Verdict:
    ok: bool
    ratio: float
    """lamina's error over eager's (in its own dtype) against the same reference."""
    message: str


def judge(dtype: torch.dtype, lamina_error: float, eager_error: float) -> Verdict:
    """float32: lamina's error against float64 under ``FP32_TOLERANCE``. bfloat16: against float32, at most
    ``BF16_ERROR_RATIO`` times eager bfloat16's own, since rounding to bfloat16 along the way is the model's."""
    if eager_error > 0:
        ratio = lamina_error / eager_error
    else:
        ratio = 1.0 if lamina_error == 0 else math.inf
    if dtype == torch.bfloat16:
        ok = math.isfinite(lamina_error) and lamina_error <= BF16_ERROR_RATIO * eager_error
        return Verdict(ok, ratio, "" if ok else f"relative error {lamina_error:.2e} is {ratio:.2f}x eager bfloat16's "
                                                f"{eager_error:.2e}, over {BF16_ERROR_RATIO:g}x")
    ok = lamina_error < FP32_TOLERANCE
    return Verdict(ok, ratio, "" if ok else f"relative error {lamina_error:.2e}, not under {FP32_TOLERANCE:.0e}")


def judged_by(dtype: torch.dtype) -> str:
    if dtype == torch.bfloat16:
        return f"lamina's error against eager float32 at most {BF16_ERROR_RATIO:g}x eager bfloat16's own"
    return f"lamina's error against eager float64 under {FP32_TOLERANCE:g}"


@attrs.frozen
class ModelResult:
    case: ModelCase
    status: str
    """ok, mismatch (lamina's output is wrong: not measured further) or failed (an exception, mostly in lamina's
    compile)."""
    message: str = ""
    traceback: str = ""
    """Where an exception that is not a LaminaError came from: a bug to report."""
    reference: str | None = None
    """The dtype of the eager reference the errors are measured against."""
    #: Relative error of each contender's main output against the reference.
    errors: dict[str, float] = attrs.field(factory=dict)
    error_ratio: float | None = None
    #: measurement (one of ``MEASUREMENTS``) -> contender -> value.
    values: dict[str, dict[str, float]] = attrs.field(factory=dict)
    #: measurement -> contender -> why it could not be measured (a call that a CUDA graph cannot capture).
    unmeasured: dict[str, dict[str, str]] = attrs.field(factory=dict)
    #: lamina_cold, lamina_warm, torch.compile: seconds from the compile call to the end of the first call.
    compile_seconds: dict[str, float] = attrs.field(factory=dict)

    def speedup(self, contender: str, figure: str) -> float | None:
        """How many times faster lamina is than ``contender`` in ``figure``."""
        times = self.values.get(figure, {})
        if "lamina" not in times or contender not in times:
            return None
        return times[contender] / times["lamina"]


def failure_message(error: BaseException) -> str:
    """One line: a LaminaError's own words (torch.compile wraps them), else the exception's type and text."""
    inner = getattr(error, "inner_exception", None) or error
    text = str(inner) if isinstance(inner, LaminaError) else f"{type(inner).__name__}: {inner}"
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _traceback(error: BaseException) -> str:
    inner = getattr(error, "inner_exception", None) or error
    return "" if isinstance(inner, LaminaError) else "".join(traceback.format_exception(error))


@contextlib.contextmanager
def fresh_kernel_cache() -> Iterator[str]:
    """``LAMINA_CACHE_DIR`` set to a new empty directory, restored (and the directory removed) afterwards."""
    previous = os.environ.get("LAMINA_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="lamina-bench-cache-") as directory:
        os.environ["LAMINA_CACHE_DIR"] = directory
        try:
            yield directory
        finally:
            if previous is None:
                os.environ.pop("LAMINA_CACHE_DIR", None)
            else:
                os.environ["LAMINA_CACHE_DIR"] = previous


def caller(fn: Callable, inputs: dict[str, torch.Tensor]) -> Call:
    """``fn(**inputs)`` as a call of no arguments, without autograd, as the instruments take it."""
    def call():
        with torch.no_grad():
            return fn(**inputs)
    return call


def _first_call(compile_model: Callable, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                synchronize: Callable[[], None]) -> tuple[Callable, torch.Tensor, float]:
    """The compiled model, its main output and the seconds from the compile call to the end of its first call."""
    start = time.perf_counter()
    compiled = compile_model(model)
    out = main_output(caller(compiled, inputs)())
    synchronize()
    return compiled, out, time.perf_counter() - start


def _lamina_cold_then_warm(compile_model: Callable, model: torch.nn.Module, inputs: dict[str, torch.Tensor],
                           synchronize: Callable[[], None], compile_seconds: dict[str, float]):
    """lamina's first call with an empty kernel cache, then again after ``torch._dynamo.reset()`` with that cache
    warm: the compiled model of the second, and its main output."""
    with fresh_kernel_cache():
        compile_seconds["lamina_cold"] = _first_call(compile_model, model, inputs, synchronize)[2]
        torch._dynamo.reset()
        compiled, out, compile_seconds["lamina_warm"] = _first_call(compile_model, model, inputs, synchronize)
    return compiled, out


class _Record:
    """The measurements of a case as they come, each contender's failures beside its values."""

    def __init__(self):
        self.values: dict[str, dict[str, float]] = {m: {} for m in MEASUREMENTS}
        self.unmeasured: dict[str, dict[str, str]] = {}

    def attempt(self, measurement: str, contender: str, measure: Callable, *args) -> None:
        try:
            self.values[measurement][contender] = measure(*args)
        except Exception as error:  # one contender that cannot be measured leaves the rest of its case standing
            self.unmeasured.setdefault(measurement, {})[contender] = failure_message(error)


def run_model_case(case: ModelCase, *, device: str, instruments: Instruments, compilers: Compilers = Compilers(),
                   per_layer: bool = True, seed: int = SEED, step: Callable[[str], None] = lambda text: None
                   ) -> ModelResult:
    """Errors first (the reference before anything compiles, while memory is free), then, if lamina's output is
    right, memory, kernels and the two times of each contender, then kernels per layer. ``step`` hears what
    has been done so far (a case can take minutes)."""
    torch._dynamo.reset()
    started = time.perf_counter()
    try:
        model = case.build(device=device, seed=seed)
        inputs = case.inputs(model, device=device, seed=seed)
        wider = reference_dtype(model, case.dtype, torch.device(device))
        with instruments.turn():
            reference = main_output(eager_at(model, inputs, wider)).cpu()
            errors = {"eager": relative_error(main_output(caller(model, inputs)()), reference)}
        if device.startswith("cuda"):  # hand the wider copy's memory back, for the processes that share the GPU
            torch.cuda.empty_cache()
    except Exception as error:
        return ModelResult(case, "failed", "building the model or its eager reference: " + failure_message(error),
                           traceback=_traceback(error))
    found = {"reference": str(wider).removeprefix("torch."), "errors": errors}
    step(f"eager reference in {wider}".replace("torch.", "") + f" ({time.perf_counter() - started:.0f} s)")

    compile_seconds: dict[str, float] = {}
    try:
        lamina, out = _lamina_cold_then_warm(compilers.lamina, model, inputs, instruments.synchronize,
                                             compile_seconds)
        errors["lamina"] = relative_error(out, reference)
        step(f"lamina compiled: cold {compile_seconds['lamina_cold']:.0f} s, warm {compile_seconds['lamina_warm']:.0f} s")
    except Exception as error:  # a bug in lamina on one case must not lose the rest of the run
        return ModelResult(case, "failed", failure_message(error), traceback=_traceback(error),
                           compile_seconds=compile_seconds, **found)
    del out

    record = _Record()
    contenders = {"lamina": lamina, "eager": model}
    if compilers.torch_compile is not None:
        try:
            inductor, out, compile_seconds["torch.compile"] = _first_call(compilers.torch_compile, model, inputs,
                                                                          instruments.synchronize)
            errors["torch.compile"] = relative_error(out, reference)
            contenders["torch.compile"] = inductor
            step(f"torch.compile compiled in {compile_seconds['torch.compile']:.0f} s")
            del out
        except Exception as error:
            record.unmeasured["compile_seconds"] = {"torch.compile": failure_message(error)}
    del reference
    verdict = judge(case.dtype, errors["lamina"], errors["eager"])
    found["error_ratio"] = verdict.ratio
    if not verdict.ok:
        return ModelResult(case, "mismatch", verdict.message, compile_seconds=compile_seconds,
                           unmeasured=record.unmeasured, **found)

    calls = {name: caller(fn, inputs) for name, fn in contenders.items()}
    for name, call in calls.items():
        record.attempt("peak_bytes", name, instruments.peak_memory, name, call)
        record.attempt("kernels", name, instruments.count_kernels, name, call)
    for figure in FIGURES:
        for name, call in calls.items():
            record.attempt(figure, name, instruments.timer, name, figure, call)
    step(f"measured ({time.perf_counter() - started:.0f} s in all)")
    if per_layer and case.layers > 1:
        _count_per_layer(case, record, device=device, instruments=instruments, compilers=compilers, seed=seed)
    return ModelResult(case, "ok", values=record.values, unmeasured=record.unmeasured, compile_seconds=compile_seconds,
                       **found)


def _count_per_layer(case: ModelCase, record: _Record, *, device: str, instruments: Instruments,
                     compilers: Compilers, seed: int) -> None:
    """(kernels with N layers - kernels with 1 layer) / (N - 1), the 1-layer model built from the same seed."""
    try:
        shallow = case.build(device=device, seed=seed, layers=1)
        inputs = case.inputs(shallow, device=device, seed=seed)
    except Exception as error:
        record.unmeasured["kernels_per_layer"] = {name: failure_message(error) for name in record.values["kernels"]}
        return
    makers = {"lamina": compilers.lamina, "eager": lambda model: model, "torch.compile": compilers.torch_compile}

    def per_layer(name: str) -> float:
        call = caller(makers[name](shallow), inputs)
        call()  # compiles, outside the instruments' lock: other processes measure meanwhile
        # (the compiled contenders take their turn to run, ``taking_turns``)
        one = instruments.count_kernels(name, call)
        return (record.values["kernels"][name] - one) / (case.layers - 1)

    for name in record.values["kernels"]:
        record.attempt("kernels_per_layer", name, per_layer, name)


def run_model_suite(cases: list[ModelCase], *, device: str, instruments: Instruments,
                    compilers: Compilers = Compilers(), per_layer: bool = True,
                    progress: Callable[[int, int, str], None] = lambda index, total, name: None,
                    step: Callable[[str], None] = lambda text: None,
                    measured: Callable[[list[ModelResult]], None] = lambda results: None) -> list[ModelResult]:
    """Run ``cases`` in order; ``progress`` hears each case as it starts and ``step`` what is done within it,
    ``measured`` sees the results so far after each case."""
    results = []
    for index, case in enumerate(cases):
        progress(index, len(cases), f"{case.name} ({case.depth} layers)")
        results.append(run_model_case(case, device=device, instruments=instruments, compilers=compilers,
                                      per_layer=per_layer, step=step))
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        measured(results)
    progress(len(cases), len(cases), "")
    return results


def geomean_speedups(results: list[ModelResult]) -> dict[str, dict[str, tuple[float, int]]]:
    """Per figure and contender: the geometric mean of lamina's speedup over the cases where both were timed, and
    how many cases that is."""
    found: dict[str, dict[str, tuple[float, int]]] = {}
    for figure in FIGURES:
        for contender in CONTENDERS[1:]:
            ratios = [s for s in (r.speedup(contender, figure) for r in results) if s is not None]
            if ratios:
                mean = math.exp(sum(math.log(s) for s in ratios) / len(ratios))
                found.setdefault(figure, {})[contender] = (mean, len(ratios))
    return found

"""``lamina bench``: the suites of lamina vs eager PyTorch vs torch.compile, by PERFORMANCE.md's method:
kernels by default, whole models with ``--models``.

``--list`` works anywhere; running cases needs a CUDA GPU (times are CUDA-graph replays).
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from pathlib import Path
from typing import IO, Callable

import attrs
import torch

from lamina.bench.model_report import format_model_listing, format_model_table, plot_model_speedups, write_document
from lamina.bench.model_report import json_document as model_json_document
from lamina.bench.model_runner import (PLAIN_CALLS, Compilers, Instruments, ModelResult, gpu_instruments,
                                       inductor_compile, lamina_compile, run_model_suite)
from lamina.bench.model_suite import ModelCase, bench_layers, model_cases, parse_layer_overrides
from lamina.bench.report import ProgressLine, default_output, format_table, json_document, reproducing_command
from lamina.bench.runner import Timer, cuda_graph_timer, run_suite
from lamina.bench.suite import DTYPES, SHORT, Case, builtin_suite, check_unique, load_suite_file
from lamina.core.errors import DeviceError, LaminaError

DEFAULT_REPLAYS = 200


def matches(name: str, pattern: str) -> bool:
    """A glob (with * ? or [) matches the whole name; any other pattern is a substring."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def select_cases(args) -> list[Case]:
    cases = builtin_suite()
    if args.suite_file:
        cases += load_suite_file(Path(args.suite_file))
    check_unique(cases)
    if args.dtype:
        cases = [c for c in cases if c.dtype == DTYPES[args.dtype]]
    if args.filter:
        cases = [c for c in cases if any(matches(c.name, p) for p in args.filter)]
    if not cases:
        raise LaminaError("no bench case matches --filter/--dtype; lamina bench --list shows the cases")
    return cases


def format_listing(cases: list[Case]) -> str:
    width = max(len(c.name) for c in cases)
    lines = [f"{'case'.ljust(width)}  dtype  {'MB moved':>10}  {'MFLOP':>12}  bound   expression"]
    for c in cases:
        bound = "memory" if c.memory_bound else "compute"
        lines.append(f"{c.name.ljust(width)}  {SHORT.get(c.dtype, str(c.dtype)):5}  {c.bytes_moved / 1e6:10.3f}  "
                     f"{c.flops / 1e6:12.3f}  {bound:7} {c.expression}")
    lines.append(f"{len(cases)} case(s)")
    return "\n".join(lines)


def command_words(args) -> list[str]:
    """The options of this run, in a canonical order, for the JSON record."""
    words = [w for pattern in args.filter or () for w in ("--filter", pattern)]
    for option, value in (("--dtype", args.dtype), ("--suite-file", args.suite_file), ("--out", args.out),
                          ("--plot", args.plot)):
        if value is not None:
            words += [option, str(value)]
    if args.replays != DEFAULT_REPLAYS:
        words += ["--replays", str(args.replays)]
    return words + (["--selection", args.selection] if args.selection else [])


def check_run_options(args) -> None:
    """What either suite needs before a long run starts, rather than after it."""
    if args.replays < 1:
        raise LaminaError(f"--replays {args.replays}: give at least 1 (PERFORMANCE.md's method uses 100 or more)")
    if args.plot:
        from lamina.bench.plot import require_matplotlib
        require_matplotlib()


def bench_command(args) -> int:
    if args.selection:  # read by every compile of the run, the model suite's through torch.compile included
        os.environ["LAMINA_SELECTION"] = args.selection
    if args.models:
        return models_command(args)
    only_models = [option for option, given in (("--layers", args.layers), ("--measure-lock", args.measure_lock),
                                                ("--no-torch-compile", args.no_torch_compile),
                                                ("--no-per-layer", args.no_per_layer)) if given]
    if only_models:
        raise LaminaError(f"{', '.join(only_models)} apply to the model suite: add --models")
    cases = select_cases(args)
    if args.list:
        print(format_listing(cases))
        return 0
    check_run_options(args)
    if not torch.cuda.is_available():
        raise DeviceError("lamina bench times kernels with CUDA graphs and needs a CUDA GPU, but PyTorch sees none; "
                          "lamina bench --list shows the cases, and lamina run --device cpu checks one program "
                          "on the simulator")
    return execute(args, cases, device="cuda", device_name=torch.cuda.get_device_name(),
                   timer=cuda_graph_timer(args.replays))


def execute(args, cases: list[Case], *, device: str, device_name: str, timer: Timer,
            torch_compile: Callable = torch.compile, stdout: IO[str] = sys.stdout,
            stderr: IO[str] = sys.stderr) -> int:
    """Run ``cases``, print the table, write the JSON record (and the plot).

    The record is rewritten after every case, so that a run cut short keeps what it measured."""
    stdout.write(f"lamina bench: {len(cases)} case(s) on {device_name}: lamina vs eager vs torch.compile, "
                 f"CUDA-graph replay, median of {args.replays}\n")
    out = Path(args.out) if args.out else default_output(device_name)
    out.parent.mkdir(parents=True, exist_ok=True)

    def record(results) -> None:
        document = json_document(results, command=reproducing_command(command_words(args)), device=device_name,
                                 replays=args.replays)
        out.write_text(json.dumps(document, indent=2) + "\n")

    results = run_suite(cases, device=device, timer=timer, torch_compile=torch_compile,
                        progress=ProgressLine(stderr), measured=record)
    stdout.write(format_table(results) + "\n")
    stdout.write(f"wrote {out}\n")
    if args.plot:
        from lamina.bench.plot import plot_speedups
        plot_speedups(results, Path(args.plot))
        stdout.write(f"plotted {args.plot}\n")
    return 0


def select_model_cases(args) -> list[ModelCase]:
    cases = model_cases(bench_layers(parse_layer_overrides(args.layers or ())))
    if args.dtype:
        cases = [c for c in cases if c.dtype == DTYPES[args.dtype]]
    if args.filter:
        cases = [c for c in cases if any(matches(c.name, p) for p in args.filter)]
    if not cases:
        raise LaminaError("no model case matches --filter/--dtype; lamina bench --models --list shows the cases")
    return cases


def model_command_words(args) -> list[str]:
    """The options of a --models run, in a canonical order, for the JSON record."""
    words = ["--models"] + [w for pattern in args.filter or () for w in ("--filter", pattern)]
    words += [w for item in args.layers or () for w in ("--layers", item)]
    for option, value in (("--dtype", args.dtype), ("--out", args.out), ("--plot", args.plot)):
        if value is not None:
            words += [option, str(value)]
    if args.replays != DEFAULT_REPLAYS:
        words += ["--replays", str(args.replays)]
    if args.measure_lock:
        words += ["--measure-lock", args.measure_lock]
    words += ["--selection", args.selection] if args.selection else []
    return words + [flag for flag, given in (("--no-torch-compile", args.no_torch_compile),
                                             ("--no-per-layer", args.no_per_layer)) if given]


def models_command(args) -> int:
    if args.suite_file:
        raise LaminaError("--suite-file adds kernel cases and does not apply to --models; pick model cases "
                          "with --filter")
    cases = select_model_cases(args)
    if args.list:
        print(format_model_listing(cases))
        return 0
    check_run_options(args)
    if not torch.cuda.is_available():
        raise DeviceError("lamina bench --models times models with CUDA graphs and needs a CUDA GPU, but PyTorch sees "
                          "none; lamina bench --models --list shows the cases, and torch.compile(model, "
                          "backend=\"lamina\") on CPU tensors runs a model on the simulator")
    instruments = gpu_instruments(args.replays, args.measure_lock)
    compilers = Compilers()
    if args.measure_lock:  # the compiled contenders' runs take turns on the GPU too, not only the measurements
        compilers = Compilers(lamina=lambda model: lamina_compile(model, instruments.turn),
                              torch_compile=lambda model: inductor_compile(model, instruments.turn))
    return execute_models(args, cases, device="cuda", device_name=torch.cuda.get_device_name(),
                          instruments=instruments, compilers=compilers)


def execute_models(args, cases: list[ModelCase], *, device: str, device_name: str, instruments: Instruments,
                   compilers: Compilers = Compilers(), stdout: IO[str] = sys.stdout,
                   stderr: IO[str] = sys.stderr) -> int:
    """Run the model ``cases``, print the table, write the JSON record (and the plot); 1 if any failed or mismatched.

    The record is rewritten after every case, so that a run cut short keeps what it measured."""
    if args.no_torch_compile:
        compilers = attrs.evolve(compilers, torch_compile=None)
    contenders = "lamina vs eager" + ("" if compilers.torch_compile is None else " vs torch.compile")
    stdout.write(f"lamina bench --models: {len(cases)} case(s) on {device_name}: {contenders}, prefill, CUDA-graph "
                 f"replay (median of {args.replays}) and plain calls (median of {PLAIN_CALLS})\n")
    out = Path(args.out) if args.out else default_output(device_name, suite="models")

    def record(results: list[ModelResult]) -> None:
        write_document(out, model_json_document(
            results, command=reproducing_command(model_command_words(args)), device=device_name, replays=args.replays,
            per_layer=not args.no_per_layer, torch_compile=compilers.torch_compile is not None,
            shared=args.measure_lock is not None))

    progress = ProgressLine(stderr)
    results = run_model_suite(cases, device=device, instruments=instruments, compilers=compilers,
                              per_layer=not args.no_per_layer, progress=progress, step=progress.step,
                              measured=record)
    stdout.write(format_model_table(results) + "\n")
    stdout.write(f"wrote {out}\n")
    if args.plot:
        plot_model_speedups(results, Path(args.plot))
        stdout.write(f"plotted {args.plot}\n")
    return 0 if all(r.status == "ok" for r in results) else 1

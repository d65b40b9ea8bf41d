"""``lamina tune``: measure the settings of a program's kernels on the GPU and keep the fastest in
the tuning database, which compiles with ``selection = "autotune"`` then read
(``lamina.contrib.autotune``); or export, import and report on that database."""

from __future__ import annotations

import argparse
import sys

import torch

import lamina
from lamina.cli.run_model import DEFAULT_SEQ, DTYPES, model_layers
from lamina.contrib.autotune import report, tuning
from lamina.contrib.autotune.policy import NAME, database_of
from lamina.contrib.autotune.provenance import usable
from lamina.core.config import load_config
from lamina.core.errors import DeviceError, LaminaError
from lamina.program_spec import program_spec

SETTINGS = {"selection": NAME, "program_cache": False}
"""How the tuned program is compiled: by the autotuner, and through every stage (a program from the
cache would have its kernels chosen already)."""


def tune_command(args) -> int:
    database = database_of(load_config())
    if args.export_to:
        count = database.export(args.export_to)
        print(f"wrote {count} tuned kernel(s) from {database.path} to {args.export_to}")
        return 0
    if args.import_from:
        count = database.import_from(args.import_from)
        print(f"added {count} tuned kernel(s) from {args.import_from} to {database.path}")
        return 0
    if args.report:
        entries = database.entries()
        kept = [e for e in entries.values() if usable(e)]
        print(f"{database.path}: {len(entries)} tuned kernel(s), {len(kept)} measured with this lamina and driver")
        print("\n".join(report.disagreements(kept)))
        return 0
    if not torch.cuda.is_available():
        raise DeviceError("lamina tune measures each kernel's candidates on a GPU, and PyTorch sees none. Tune on a "
                          "machine like the one the programs will run on; lamina tune --export and --import carry "
                          "the results to others of the same kind")
    with tuning.session(candidates=args.candidates) as session:
        if args.model is not None:
            _tune_model(args)
        elif args.models:
            _tune_model_cases(args)
        elif args.kernels:
            _tune_kernel_cases(args)
        else:
            spec = program_spec(args.code, args.input)
            print(f"program   {spec.describe()}")
            lamina.compile(spec.function(), spec.example_inputs(device="cuda"), target=args.target, **SETTINGS)
    print(f"measured  {len(session.tuned)} kernel(s) on {torch.cuda.get_device_name()}, up to {args.candidates} "
          f"candidates each; {len(session.untuned)} not measured ({_reasons(session.untuned)}); "
          f"kept in {database.path}")
    print("\n".join(report.wins(session.tuned)))
    print()
    print("\n".join(report.disagreements(e for _, e in session.tuned)))
    return 0


def _tune_model(args) -> None:
    """Each sequence length's forward pass, compiled as users run it: ``torch.compile(model,
    backend="lamina")``, ``model(input_ids=...)``."""
    from lamina.models import build_model, model_config, random_input_ids

    config = model_config(args.model)
    layers = model_layers(config, args.layers)
    dtype = args.dtype or "float32"
    model = build_model(config, num_layers=layers, dtype=DTYPES[dtype], device="cuda", seed=0)
    print(f"model     {config.describe()}, {layers} of {config.num_hidden_layers} layers, {dtype}")
    for seq in args.seq or [DEFAULT_SEQ]:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="lamina", dynamic=False, options=SETTINGS)
        print(f"tuning    input ids (1, {seq})", file=sys.stderr, flush=True)
        with torch.no_grad():
            compiled(input_ids=random_input_ids(config, seq, device="cuda", seed=0))


def _tune_model_cases(args) -> None:
    """The cases of ``lamina bench --models`` that ``--filter`` and ``--dtype`` select, built and called as the
    bench calls them, so that ``lamina bench --models --selection autotune`` finds their kernels tuned."""
    from lamina.cli.bench_command import select_model_cases

    for case in select_model_cases(argparse.Namespace(layers=None, dtype=args.dtype, filter=args.filter)):
        torch._dynamo.reset()
        model = case.build(device="cuda", seed=0)
        print(f"tuning    {case.name}: {case.describe()}", file=sys.stderr, flush=True)
        compiled = torch.compile(model, backend="lamina", dynamic=False, options=SETTINGS)
        with torch.no_grad():
            compiled(**case.inputs(model, device="cuda", seed=0))
        del model, compiled
        torch.cuda.empty_cache()


def _tune_kernel_cases(args) -> None:
    """The cases of the kernel suite (``lamina bench``) that ``--filter`` and ``--dtype`` select, on the
    inputs the bench makes."""
    from lamina.cli.bench_command import select_cases

    for case in select_cases(argparse.Namespace(suite_file=None, dtype=args.dtype, filter=args.filter)):
        print(f"tuning    {case.name}: {case.expression}", file=sys.stderr, flush=True)
        program = case.program()
        lamina.compile(program.function(), program.example_inputs(seed=0, device="cuda"), **SETTINGS)


def _reasons(untuned: list[tuple[str, str]]) -> str:
    counts: dict[str, int] = {}
    for _, why in untuned:
        counts[why] = counts.get(why, 0) + 1
    return "; ".join(f"{count}: {why}" for why, count in sorted(counts.items(), key=lambda item: -item[1])) or "none"


def check_arguments(args) -> None:
    actions = [flag for flag, given in (("--export", args.export_to), ("--import", args.import_from),
                                        ("--report", args.report)) if given]
    programs = [flag for flag, given in (("-c/--input", args.code or args.input), ("--model", args.model),
                                         ("--models", args.models), ("--kernels", args.kernels)) if given]
    if len(actions) > 1 or (actions and programs):
        raise LaminaError(f"{', '.join(actions + programs)}: give one of --export, --import, --report, or a program "
                          "to tune")
    if len(programs) > 1:
        raise LaminaError(f"{', '.join(programs)}: tune one kind of program at once")
    if args.model is None and (args.seq or args.layers):
        raise LaminaError("--seq and --layers choose what --model builds; add --model")
    if args.model is None and not (args.models or args.kernels) and args.dtype:
        raise LaminaError("--dtype chooses what --model builds, or which cases of --models or --kernels; add one")
    if args.filter and not (args.models or args.kernels):
        raise LaminaError("--filter picks cases of --models or --kernels; add one of them")
    if args.candidates < 2:
        raise LaminaError(f"--candidates {args.candidates}: tuning compares at least 2 settings per kernel")

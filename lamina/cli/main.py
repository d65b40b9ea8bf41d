"""``lamina``: compile, run and inspect programs; list plugins.

Errors that lamina raises on purpose are printed as one message without a
traceback, and the command exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from lamina.bench.model_suite import BENCH_LAYERS
from lamina.core.errors import LaminaError
from lamina.core.pipeline import LEVELS
from lamina.models.configs import MODELS
from lamina.program_spec import INPUT_HELP, RUNNING_EXAMPLE


def _add_program_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-c", "--code", metavar="EXPR",
        help=f"a PyTorch expression of the inputs, e.g. \"{RUNNING_EXAMPLE}\"; "
             "without it the built-in example runs (that expression with x=16,64 bias=64 w=64,16)",
    )
    parser.add_argument("--input", action="append", metavar="NAME=SHAPE[:DTYPE]", help=INPUT_HELP)
    parser.add_argument("--schedule", help="use this schedule wherever it applies (e.g. generic, contraction)")
    parser.add_argument("--target", help="compile for this target (default: the visible GPU, else sm_90)")
    parser.add_argument("--timings", action="store_true",
                        help="also print where the compile's time went: each stage, and the slowest kernels")


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    models = parser.add_argument_group(
        "whole models", "run a transformer that lamina ships a configuration for, with random weights "
                        "(needs pip install \"lamina[models]\")")
    models.add_argument("--model", choices=sorted(MODELS), help="the model to build instead of -c EXPR")
    models.add_argument("--seq", type=int, help="tokens in the input (default: 128)")
    models.add_argument("--layers", type=int, metavar="N", help="keep the first N decoder layers (default: all)")
    models.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="the weights' dtype (default: float32)")
    models.add_argument("--generate", type=int, metavar="N",
                        help="generate N tokens greedily (model.generate), timed against eager "
                             "and torch.compile, instead of one forward pass")
    models.add_argument("--prompt", type=int, metavar="TOKENS", help="with --generate: the prompt's length (default: 128)")
    models.add_argument("--batch", type=int, metavar="B", help="with --generate: sequences generated at once (default: 1)")
    models.add_argument("--cache", choices=("static", "dynamic"),
                        help="with --generate: transformers' static key-value cache, or its default cache that grows "
                             "at each step (default: static)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lamina", description="A pluggable ML compiler from PyTorch to CUDA.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    compile_parser = commands.add_parser(
        "compile", help="compile a program and print its IR",
        description="Compile a PyTorch expression (or the built-in example) and print one IR level or all six.",
        epilog=f"example: lamina compile -c \"{RUNNING_EXAMPLE}\" --input x=16,64 --input bias=64 --input w=64,16 --ir tile",
    )
    _add_program_arguments(compile_parser)
    compile_parser.add_argument("--ir", choices=LEVELS + ("all",), default="all", help="the level to print (default: all)")

    run_parser = commands.add_parser(
        "run", help="compile, run and compare with PyTorch",
        description="Compile a program, run it on random inputs (on the GPU if one is visible, else on the "
                    "Kernel IR simulator) and compare the result with PyTorch in float64.",
    )
    _add_program_arguments(run_parser)
    run_parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                            help="cuda: the GPU; cpu: the Kernel IR simulator; auto (default): the GPU if visible")
    run_parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (and weights)")
    _add_model_arguments(run_parser)

    plugins_parser = commands.add_parser("plugins", help="list plugins and what they registered")
    plugins_parser.add_argument("--json", action="store_true", help="print JSON for machines")
    plugins_parser.add_argument("--stages", action="store_true",
                                help="only which provider each stage will use under the current config")
    cache_parser = commands.add_parser(
        "cache", help="show or empty lamina's caches of compiled programs and kernels",
        description="Show what lamina's caches hold under the cache directory (cache_dir, $LAMINA_CACHE_DIR), or "
                    "remove every entry.")
    cache_parser.add_argument("action", choices=("info", "clear"),
                              help="info: the entries and bytes of each cache and the size limit; clear: remove them")
    _add_bench_parser(commands)
    _add_tune_parser(commands)
    models_parser = commands.add_parser(
        "models", help="list the architectures lamina compiles whole",
        description="List the architectures of the model matrix: each one is checked in CI through lamina.compile "
                    "and torch.compile(backend=\"lamina\"), scaled down, against eager PyTorch.")
    models_parser.add_argument("--markdown", action="store_true", help="print the README's table of them")
    return parser


def _add_tune_parser(commands) -> None:
    tune = commands.add_parser(
        "tune", help="measure kernels' settings on the GPU for selection = \"autotune\"",
        description="Compile a program (a PyTorch expression, the built-in example, or a shipped model's forward "
                    "pass through torch.compile) and measure, on the GPU, the cost model's best few settings of "
                    "every kernel the tuning database does not hold yet; keep the fastest there. Compiles with "
                    "selection = \"autotune\" (LAMINA_SELECTION=autotune) then use it. The database is tuning.json "
                    "in the cache directory.",
        epilog="examples: lamina tune --model tinyllama --dtype bfloat16 --seq 128 --seq 2048; "
               "lamina tune --models --filter 'llama.b1.*.bf16'; lamina tune --export h200.json; lamina tune --report")
    tune.add_argument("-c", "--code", metavar="EXPR", help="a PyTorch expression of the inputs (as for lamina run)")
    tune.add_argument("--input", action="append", metavar="NAME=SHAPE[:DTYPE]", help=INPUT_HELP)
    tune.add_argument("--target", help="compile for this target (default: the visible GPU)")
    tune.add_argument("--model", choices=sorted(MODELS), help="tune a shipped model's forward pass instead")
    tune.add_argument("--seq", type=int, action="append", metavar="TOKENS",
                      help="with --model: tokens in the input (default: 128); repeatable")
    tune.add_argument("--layers", type=int, metavar="N", help="with --model: keep the first N decoder layers")
    tune.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                      help="with --model: the weights' dtype; with --models or --kernels: only cases of this dtype")
    tune.add_argument("--models", action="store_true",
                      help="tune the cases of lamina bench --models instead, built and called as the bench does")
    tune.add_argument("--kernels", action="store_true",
                      help="tune the cases of the kernel suite (lamina bench) instead, on the bench's inputs")
    tune.add_argument("--filter", action="append", metavar="PATTERN",
                      help="with --models or --kernels: only cases whose name contains PATTERN or matches it as a "
                           "glob; repeatable")
    tune.add_argument("--candidates", type=int, default=4, metavar="N",
                      help="settings measured per kernel, the cost model's choice first (default: 4)")
    tune.add_argument("--export", dest="export_to", metavar="FILE",
                      help="write the tuning database to FILE, to carry it to another machine of the same kind")
    tune.add_argument("--import", dest="import_from", metavar="FILE", help="add the entries of FILE to the database")
    tune.add_argument("--report", action="store_true",
                      help="print where the measurements disagreed with the cost model's ranking, by schedule and knob")


def _add_bench_parser(commands) -> None:
    bench = commands.add_parser(
        "bench", help="benchmark lamina against eager PyTorch and torch.compile",
        description="Run a benchmark suite on the GPU: each case checked against PyTorch in a wider dtype, then "
                    "timed against eager PyTorch and torch.compile. By default the kernel suite (the kernels of "
                    "TinyLlama-1.1B and Qwen2.5-7B, and the running example), timed by CUDA-graph replay; with "
                    "--models the whole-model suite: prefill of every architecture of the model matrix through "
                    "torch.compile(model, backend=\"lamina\"), timed by CUDA-graph replay and by plain calls.",
        epilog="examples: lamina bench --filter 'qwen.*.s2048.fp32' --plot speedups.png; "
               "lamina bench --models --filter 'llama.b1.*.bf16' --layers llama=4",
    )
    bench.add_argument("--filter", action="append", metavar="PATTERN",
                       help="only cases whose name contains PATTERN, or matches it as a glob (*, ?); repeatable")
    bench.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="only cases of this dtype")
    bench.add_argument("--suite-file", metavar="FILE.toml",
                       help="add cases from a TOML file: one [[case]] table each, with name, expression (as for "
                            "lamina run -c), inputs = [\"x=2048,4096:float32\", ...] and optionally flops")
    bench.add_argument("--list", action="store_true", help="print the selected cases and exit (needs no GPU)")
    bench.add_argument("--replays", type=int, default=200, metavar="N", help="CUDA-graph replays per figure (default: 200)")
    bench.add_argument("--out", metavar="PATH",
                       help="the JSON record (default: benchmarks/results/<date>_<gpu>_bench.json, "
                            "with --models <date>_<gpu>_models.json)")
    bench.add_argument("--plot", metavar="PATH", help="also draw the speedups as a PNG (needs lamina[plot])")
    bench.add_argument("--selection", metavar="POLICY",
                       help="compile lamina's contender with this selection policy: autotune takes the settings "
                            "lamina tune measured (default: the configuration's, cost_model)")
    models = bench.add_argument_group(
        "whole models", "prefill of ARCH.bBATCH.sLENGTH.DTYPE cases: every architecture of lamina's model matrix at "
                        "batch 1 and 8, bf16 and fp32, with random weights (needs pip install \"lamina[models]\")")
    models.add_argument("--models", action="store_true",
                        help="run the whole-model suite instead of the kernel suite")
    models.add_argument("--layers", action="append", metavar="ARCH=N",
                        help="build N layers of ARCH (default: all of them, except "
                             f"{', '.join(f'{arch}={n}' for arch, n in BENCH_LAYERS.items())}); repeatable")
    models.add_argument("--no-torch-compile", action="store_true",
                        help="leave torch.compile out (its compiles take minutes on big models)")
    models.add_argument("--no-per-layer", action="store_true",
                        help="skip the kernels per layer, which compile each contender once more at 1 layer")
    models.add_argument("--measure-lock", metavar="FILE",
                        help="hold an exclusive lock on FILE while measuring, so that several bench processes can "
                             "share one GPU: they compile at once and measure one at a time")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "compile":
            from lamina.cli.compile_command import compile_command
            return compile_command(args)
        if args.command == "run" and args.model is not None and args.generate is not None:
            from lamina.cli.run_generate import run_generate_command
            return run_generate_command(args)
        if args.command == "run" and args.model is not None:
            from lamina.cli.run_model import run_model_command
            return run_model_command(args)
        if args.command == "run":
            from lamina.cli.run_command import run_command
            return run_command(args)
        if args.command == "models":
            from lamina.cli.models_command import models_command
            return models_command(args)
        if args.command == "bench":
            from lamina.cli.bench_command import bench_command
            return bench_command(args)
        if args.command == "tune":
            from lamina.cli.tune_command import check_arguments, tune_command
            check_arguments(args)
            return tune_command(args)
        if args.command == "cache":
            from lamina.cli.cache_command import cache_command
            return cache_command(args)
        from lamina.cli.plugins_command import plugins_command
        return plugins_command(args)
    except LaminaError as e:
        print(f"lamina: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

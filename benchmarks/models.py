"""Whole models on the GPU: TinyLlama-1.1B and Qwen2.5-7B with random weights, timed by CUDA-graph replay.

    python benchmarks/models.py --out benchmarks/results/DATE_GPU_models.json
    python benchmarks/models.py --out benchmarks/results/DATE_GPU_models_quick.json --quick
    python benchmarks/models.py --out benchmarks/results/DATE_GPU_qwen28.json --models qwen2.5-7b --layers qwen2.5-7b=28

For every model, dtype and sequence length, in one process: the logits against eager
PyTorch (float64 reference for float32 weights, float32 for bfloat16; bfloat16 logits
are judged against eager's own bfloat16 logits, and both errors are recorded, with
torch.compile's own errors beside them for scale), kernels in all
and per decoder layer (lamina, eager, torch.compile), lamina's compile time with an
empty kernel cache and again with a warm one, peak GPU memory of a forward pass
(lamina against eager), and the forward time of lamina, eager and
torch.compile(dynamic=False) from CUDA-graph replays (median). The JSON file is
rewritten after each case, so an interrupted run keeps what it measured. The exit
status is 1 if any case failed or missed its tolerance.

Each case compiles the model twice with lamina (cold, warm) and once or twice with
torch.compile, so TinyLlama's 22 layers take minutes per case: to stay within a
10-minute command, run one model (or one dtype) per command, or --quick first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.models import MODELS, build_model, random_input_ids
from lamina.models.layer_counts import LayerCounts, cuda_kernels_per_call, layer_counts
from lamina.models.measure import PeakMemory, peak_memory, reference_logits
from script_command import reproducing_command

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}
JUDGED_BY = {
    "float32": "relative_error (against the float64 reference)",
    "bfloat16": "relative_error_against_eager (eager PyTorch in bfloat16 on the same weights and inputs: both round "
                "to bfloat16 along the way, so each differs from the float32 reference by about as much)",
}
DEFAULT_LAYERS = {"tinyllama": MODELS["tinyllama"].num_hidden_layers, "qwen2.5-7b": 2}
DEFAULT_SEQ = (128, 512)
QUICK_SEQ = (128,)
DEFAULT_REPLAYS = 100
QUICK_REPLAYS = 30
SEED = 0


def parse_layers(items: list[str]) -> dict[str, int]:
    """``["qwen2.5-7b=28"]`` over the defaults (all of TinyLlama's layers, two of Qwen's)."""
    layers = dict(DEFAULT_LAYERS)
    for item in items:
        name, sep, count = item.partition("=")
        if not sep or name not in MODELS or not count.isdigit():
            raise argparse.ArgumentTypeError(f"--layers {item!r}: write MODEL=N with MODEL one of {', '.join(MODELS)}")
        if not 1 <= int(count) <= MODELS[name].num_hidden_layers:
            raise argparse.ArgumentTypeError(f"--layers {item!r}: {name} has 1 to {MODELS[name].num_hidden_layers} layers")
        layers[name] = int(count)
    return layers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write, under benchmarks/results/")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--seq", nargs="+", type=int, help=f"sequence lengths (default {' '.join(map(str, DEFAULT_SEQ))}; "
                                                           f"--quick: {' '.join(map(str, QUICK_SEQ))})")
    parser.add_argument("--layers", action="append", default=[], metavar="MODEL=N",
                        help="decoder layers to build (default: tinyllama=22, qwen2.5-7b=2)")
    parser.add_argument("--replays", type=int, help=f"CUDA-graph replays per timing (default {DEFAULT_REPLAYS}; "
                                                    f"--quick: {QUICK_REPLAYS})")
    parser.add_argument("--quick", action="store_true",
                        help="S=128 only, fewer replays, and torch.compile's kernels counted in all, not per layer")
    parser.add_argument("--no-torch-compile", action="store_true", help="leave torch.compile out")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.layers = parse_layers(args.layers)
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    args.seq = tuple(args.seq or (QUICK_SEQ if args.quick else DEFAULT_SEQ))
    args.replays = args.replays or (QUICK_REPLAYS if args.quick else DEFAULT_REPLAYS)
    for seq in args.seq:
        too_long = [name for name in args.models if not 1 <= seq <= MODELS[name].max_position_embeddings]
        if too_long:
            parser.error(f"--seq {seq} does not fit {', '.join(too_long)}")
    return args


def write_results(path: str, result: dict) -> None:
    """Write ``result`` as JSON, replacing the file only once the new one is whole."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(temporary, target)


def counts_json(counts: LayerCounts) -> dict:
    return {"total": counts.total, "per_layer": counts.per_layer, "outside_layers": counts.outside_layers,
            "method": counts.describe()}


def memory_json(memory: PeakMemory) -> dict:
    return {"before_bytes": memory.before, "peak_bytes": memory.peak, "above_before_bytes": memory.above_before}


def timed_compile(model, ids: torch.Tensor) -> tuple[lamina.CompiledFunction, dict]:
    """Compile in a fresh Compiler, then call once. The compile loads the kernels for the GPU of the
    inputs (NVRTC, or the cubin cache in $LAMINA_CACHE_DIR); the first call runs one forward pass."""
    started = time.perf_counter()
    compiled = lamina.Compiler().compile(model, (ids,))
    loading = time.perf_counter()
    with torch.no_grad():
        compiled(ids)
    torch.cuda.synchronize()
    done = time.perf_counter()
    return compiled, {"to_cuda_source_s": compiled.compile_seconds, "first_call_s": done - loading,
                      "total_s": done - started}


def run_case(model, config, layers: int, dtype: str, seq: int, args) -> dict:
    """One model, dtype and sequence length: correctness, kernels, compile time, memory, time."""
    case: dict = {"model": config.name, "layers": layers, "dtype": dtype, "seq": seq}
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    ids = random_input_ids(config, seq, device="cuda", seed=SEED)

    with tempfile.TemporaryDirectory(prefix="lamina-cache-") as cache_dir:
        previous = os.environ.get("LAMINA_CACHE_DIR")
        os.environ["LAMINA_CACHE_DIR"] = cache_dir
        try:
            _, cold = timed_compile(model, ids)
            compiled, warm = timed_compile(model, ids)
        finally:
            if previous is None:
                os.environ.pop("LAMINA_CACHE_DIR")
            else:
                os.environ["LAMINA_CACHE_DIR"] = previous
    case["compile"] = {"cold": cold, "warm": warm}
    kernels = {"lamina": layer_counts(lambda m: lamina.Compiler().compile(m, (ids,)).kernel_count, model,
                                      total=compiled.kernel_count)}

    out, lamina_memory = peak_memory(compiled, ids)
    eager_out, eager_memory = peak_memory(model, ids)
    case["memory"] = {"lamina": memory_json(lamina_memory), "eager": memory_json(eager_memory),
                      "ratio_above_before": lamina_memory.above_before / max(eager_memory.above_before, 1)}

    reference, wider = reference_logits(model, ids, DTYPES[dtype])
    error = relative_error(out, reference)
    against_eager = relative_error(out, eager_out)
    judged = error if dtype == "float32" else against_eager
    case["correctness"] = {
        "reference": f"eager PyTorch in {str(wider).removeprefix('torch.')}, same weights",
        "relative_error": error,
        "eager_relative_error": relative_error(eager_out, reference),
        "relative_error_against_eager": against_eager,
        "judged_by": JUDGED_BY[dtype],
        "tolerance": TOLERANCE[dtype],
        "ok": judged < TOLERANCE[dtype],
    }
    del out

    contenders = {"lamina": compiled, "eager": model}
    if not args.no_torch_compile:
        compiled_torch = torch.compile(model, dynamic=False)
        started = time.perf_counter()
        with torch.no_grad():
            torch_out = compiled_torch(ids)
        torch.cuda.synchronize()
        case["compile"]["torch.compile_first_call_s"] = time.perf_counter() - started
        case["correctness"]["torch.compile_relative_error"] = relative_error(torch_out, reference)
        case["correctness"]["torch.compile_relative_error_against_eager"] = relative_error(torch_out, eager_out)
        contenders["torch.compile"] = compiled_torch
        del torch_out
    del reference, eager_out
    times = {name: attempt(lambda: time_cuda_graph(fn, (ids,), replays=args.replays, warmup=5))
             for name, fn in contenders.items()}
    case["forward_us"] = times
    if isinstance(times["lamina"], float):
        case["lamina_speedup"] = {name: us / times["lamina"] for name, us in times.items()
                                  if name != "lamina" and isinstance(us, float)}

    kernels["eager"] = attempt(lambda: layer_counts(lambda m: cuda_kernels_per_call(m, (ids,)), model))
    if "torch.compile" in contenders:
        kernels["torch.compile"] = attempt(lambda: torch_compile_kernels(contenders["torch.compile"], model, ids,
                                                                         per_layer=not args.quick))
    case["kernels"] = {name: counts_json(c) if isinstance(c, LayerCounts) else c for name, c in kernels.items()}
    return case


def torch_compile_kernels(compiled_torch, model, ids: torch.Tensor, per_layer: bool) -> LayerCounts | dict:
    """torch.compile's kernels per forward pass; per layer, it compiles the model once more at depth 1."""
    total = cuda_kernels_per_call(compiled_torch, (ids,))
    if not per_layer:
        return {"total": total}
    return layer_counts(lambda m: cuda_kernels_per_call(torch.compile(m, dynamic=False), (ids,)), model, total=total)


def attempt(measure):
    """``measure()``, or what went wrong: one contender that cannot be measured (a forward pass that a
    CUDA graph cannot capture) leaves the other measurements of its case standing."""
    try:
        return measure()
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def summary(case: dict) -> str:
    if "failure" in case:
        return f"{case['model']} L={case['layers']} {case['dtype']} S={case['seq']}: FAILED {case['failure']}"
    c, k, t = case["correctness"], case["kernels"], case["forward_us"]
    times = "  ".join(f"{name} {us / 1000:.3f} ms" if isinstance(us, float) else f"{name} {us['error'][:80]}"
                      for name, us in t.items())
    return (f"{case['model']} L={case['layers']} {case['dtype']} S={case['seq']}: error {c['relative_error']:.2e} "
            f"(eager's {c['eager_relative_error']:.2e}; against eager {c['relative_error_against_eager']:.2e}; "
            + (f"torch.compile against eager {c['torch.compile_relative_error_against_eager']:.2e}; "
               if "torch.compile_relative_error_against_eager" in c else "") +
            f"{'ok' if c['ok'] else 'MISMATCH'}), kernels {k['lamina']['total']} ({k['lamina']['per_layer']:g}/layer), "
            f"compile cold {case['compile']['cold']['total_s']:.1f} s warm {case['compile']['warm']['total_s']:.1f} s, "
            f"memory x{case['memory']['ratio_above_before']:.2f} eager's, {times}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/models.py needs a CUDA GPU", file=sys.stderr)
        return 2
    result = {
        "suite": "models",
        "command": reproducing_command("models.py", argv, args.out),
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "lamina": lamina.__version__,
        "python": platform.python_version(),
        "method": (
            f"random weights (seed {SEED}), batch 1; forward_us: CUDA-graph replay of one forward pass, timed with "
            f"CUDA events after warm-up, median of {args.replays} replays, lamina, eager and "
            "torch.compile(dynamic=False) in one process on the same inputs; correctness against eager PyTorch "
            "on the same weights cast to float64 (float32 weights; float32 where float64 does not fit) or to "
            "float32 (bfloat16 weights); kernels per forward pass from lamina's Kernel IR and from the PyTorch "
            "profiler, per layer = (count with N layers - count with 1) / (N - 1); compile cold: empty "
            "LAMINA_CACHE_DIR, warm: a fresh Compiler on the same cache; memory: torch.cuda.max_memory_allocated "
            "during one forward pass, and its excess over what was allocated before the call"
        ),
        "cases": [],
    }
    failed = False
    for name in args.models:
        config = MODELS[name]
        for dtype in args.dtypes:
            model = build_model(config, num_layers=args.layers[name], dtype=DTYPES[dtype], device="cuda", seed=SEED)
            for seq in args.seq:
                try:
                    case = run_case(model, config, args.layers[name], dtype, seq, args)
                except Exception as error:  # a failing case is recorded and the others still run
                    case = {"model": name, "layers": args.layers[name], "dtype": dtype, "seq": seq,
                            "failure": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
                failed = failed or "failure" in case or not case["correctness"]["ok"]
                result["cases"].append(case)
                write_results(args.out, result)
                print(summary(case), flush=True)
            del model
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``lamina run --model``: a shipped transformer with random weights, compiled, run and checked.

Prints the kernel count (in all and per decoder layer), the compile time, the peak
memory of the forward pass, the error of the logits against eager PyTorch (float32
logits against float64; bfloat16 and float16 ones against eager in the same dtype,
and against float32 beside eager's own error) and, on a GPU, the forward time against
eager PyTorch and torch.compile.
"""

from __future__ import annotations

import sys
import time

import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.cli.run_command import choose_device
from lamina.core.errors import LaminaError
from lamina.models import build_model, model_config, random_input_ids
from lamina.models.configs import ModelConfig
from lamina.models.layer_counts import cuda_kernels_per_call, layer_counts
from lamina.models.measure import peak_memory, reference_logits

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_SEQ = 128
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-2}

SIMULATOR_FLOPS_PER_SECOND = 2e7
"""What the Kernel IR simulator sustains on a model's matmuls, measured on one CPU core."""
SIMULATOR_WARN_FLOPS = 3e8
SIMULATOR_REFUSE_FLOPS = 2e10

TIMING_REPLAYS = 100


def _duration(seconds: float) -> str:
    if seconds > 5400:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes" if seconds > 120 else f"{seconds:.0f} seconds"


def check_simulator_size(config: ModelConfig, flops: float, what: str, smaller: str) -> None:
    """The simulator executes every thread of every kernel on the CPU: full-size models are out of reach.
    ``what`` says what takes ``flops`` (``... at 128 tokens``); ``smaller`` how to ask for less."""
    what = f"{what} is {flops:.1e} FLOPs, about {_duration(flops / SIMULATOR_FLOPS_PER_SECOND)} on the Kernel IR simulator"
    if flops > SIMULATOR_REFUSE_FLOPS:
        raise LaminaError(
            f"{what}; lamina simulates at most {SIMULATOR_REFUSE_FLOPS:.0e} FLOPs. Pass {smaller} to simulate "
            f"a slice of {config.name}, or run on a GPU"
        )
    if flops > SIMULATOR_WARN_FLOPS:
        print(f"lamina: warning: {what}", file=sys.stderr)


def model_layers(config: ModelConfig, requested: int | None) -> int:
    if requested is None:
        return config.num_hidden_layers
    if not 1 <= requested <= config.num_hidden_layers:
        raise LaminaError(f"--layers {requested}: {config.name} has 1 to {config.num_hidden_layers} decoder layers")
    return requested


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def run_model_command(args) -> int:
    if args.code is not None or args.input:
        raise LaminaError("--model runs a shipped model: leave out -c and --input")
    if args.prompt is not None or args.batch is not None or args.cache is not None:
        raise LaminaError("--prompt, --batch and --cache are for --generate N; a forward pass takes --seq")
    device = choose_device(args.device)
    config = model_config(args.model)
    layers = model_layers(config, args.layers)
    dtype_name = args.dtype or "float32"
    dtype = DTYPES[dtype_name]
    seq = DEFAULT_SEQ if args.seq is None else args.seq
    ids = random_input_ids(config, seq, device=device, seed=args.seed)
    if device == "cpu":
        check_simulator_size(config, config.forward_flops(seq, layers),
                             f"a forward pass of {config.name} with {layers} layer(s) at {seq} tokens",
                             "--layers 1 and a small --seq (such as --seq 8)")
    model = build_model(config, num_layers=layers, dtype=dtype, device=device, seed=args.seed)
    print(f"model     {config.describe()}")
    print(f"          {layers} of {config.num_hidden_layers} layers, random weights (seed {args.seed}), "
          f"{dtype_name}, input ids (1, {seq})")

    compiler = lamina.Compiler(schedule=args.schedule, target=args.target)
    compiled = compiler.compile(model, (ids,))
    counts = layer_counts(lambda m: compiler.compile(m, (ids,)).kernel_count, model, total=compiled.kernel_count)
    print(f"compiled  in {compiled.compile_seconds:.2f} s for {compiled.compilation.target.name}")
    print(f"kernels   {counts.describe()}")
    if args.timings:
        print(compiled.compilation.timings.format())

    if device == "cuda":
        print(f"ran on    {torch.cuda.get_device_name()}")
        first = time.perf_counter()
        compiled(ids)
        torch.cuda.synchronize()
        print(f"first run {time.perf_counter() - first:.2f} s (the kernels were compiled with the program)")
        out, memory = peak_memory(compiled, ids)
        _, eager = peak_memory(model, ids)
        print(f"memory    peak {_gib(memory.peak)} during lamina's forward pass ({_gib(memory.above_before)} above "
              f"the {_gib(memory.before)} of weights and inputs); eager PyTorch: {_gib(eager.peak)} "
              f"({_gib(eager.above_before)} above)")
    else:
        print("ran on    the Kernel IR simulator (CPU)")
        out = compiled(ids)
        print("memory    not measured on the CPU (the simulator's buffers say nothing of a GPU's)")

    reference, wider = reference_logits(model, ids, dtype)
    reference_name = f"eager PyTorch in {str(wider).removeprefix('torch.')}"
    error = relative_error(out, reference)
    tolerance = TOLERANCE[dtype]
    if dtype == torch.float32:
        judged, judged_name = error, reference_name
        print(f"error     {error:.2e} relative to {reference_name} ({_verdict(error, tolerance)}, tolerance {tolerance:.0e})")
    else:
        with torch.no_grad():
            eager_out = model(ids)
        judged, judged_name = relative_error(out, eager_out), f"eager PyTorch in {dtype_name}"
        print(f"error     {judged:.2e} relative to {judged_name} ({_verdict(judged, tolerance)}, tolerance {tolerance:.0e})")
        print(f"          {error:.2e} relative to {reference_name}, where eager PyTorch in {dtype_name} has "
              f"{relative_error(eager_out, reference):.2e}")
    if device == "cuda":
        _print_gpu_comparison(model, compiled, ids)
    if judged > tolerance:
        raise LaminaError(f"the logits differ from {judged_name}'s by {judged:.2e} (tolerance {tolerance:.0e})")
    return 0


def _verdict(error: float, tolerance: float) -> str:
    return "ok" if error <= tolerance else "MISMATCH"


def _print_gpu_comparison(model, compiled, ids: torch.Tensor) -> None:
    compiled_torch = torch.compile(model, dynamic=False)
    contenders = {"lamina": compiled, "eager": model, "torch.compile": compiled_torch}
    times = {name: time_cuda_graph(fn, (ids,), replays=TIMING_REPLAYS, warmup=5) for name, fn in contenders.items()}
    print(f"time      forward pass, CUDA-graph replay, median of {TIMING_REPLAYS}")
    for name, us in times.items():
        ratio = "" if name == "lamina" else f"   ({us / times['lamina']:.2f}x lamina's time)"
        print(f"  {name:14s} {us / 1000:9.3f} ms{ratio}")
    eager = layer_counts(lambda m: cuda_kernels_per_call(m, (ids,)), model)
    inductor = layer_counts(lambda m: cuda_kernels_per_call(torch.compile(m, dynamic=False), (ids,)), model,
                            total=cuda_kernels_per_call(compiled_torch, (ids,)))
    print(f"kernels   eager PyTorch: {eager.describe()}")
    print(f"          torch.compile: {inductor.describe()}")

"""``lamina run``: compile, run on random inputs, compare with PyTorch, and time on a GPU."""

from __future__ import annotations

import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph
from lamina.core.errors import DeviceError, LaminaError
from lamina.program_spec import program_spec

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def choose_device(choice: str) -> str:
    if choice == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda was asked for, but no CUDA GPU is visible to PyTorch; use --device cpu to run on the simulator")
    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return choice


def run_command(args) -> int:
    stray = [f"--{name}" for name in ("seq", "layers", "dtype", "generate", "prompt", "batch", "cache")
             if getattr(args, name) is not None]
    if stray:
        raise LaminaError(f"{', '.join(stray)} can only be used with --model")
    device = choose_device(args.device)
    spec = program_spec(args.code, args.input)
    fn = spec.function()
    inputs = spec.example_inputs(seed=args.seed, device=device)
    compiled = lamina.compile(fn, inputs, schedule=args.schedule, target=args.target)
    schedules = ", ".join(f"{t.kernel.name}: {t.schedule}" for t in compiled.compilation.tiles)
    print(f"program   {spec.describe()}")
    print(f"compiled  in {compiled.compile_seconds:.2f} s for {compiled.compilation.target.name}: "
          f"{compiled.kernel_count} kernel(s) ({schedules})")
    if args.timings:
        print(compiled.compilation.timings.format())
    where = torch.cuda.get_device_name() if device == "cuda" else "the Kernel IR simulator (CPU)"
    out = compiled(*inputs)
    reference = float64_reference(fn, inputs)
    error = relative_error(out, reference)
    tolerance = TOLERANCE.get(out.dtype, 1e-5)
    verdict = "ok" if error <= tolerance else "MISMATCH"
    print(f"ran on    {where}")
    print(f"error     {error:.2e} relative to PyTorch in float64 ({verdict}, tolerance {tolerance:.0e})")
    if device == "cuda":
        _print_timings(fn, compiled, inputs)
    if verdict != "ok":
        raise LaminaError(f"the result differs from PyTorch's by {error:.2e} (tolerance {tolerance:.0e})")
    return 0


def _print_timings(fn, compiled, inputs) -> None:
    contenders = {"lamina": compiled, "eager": fn, "torch.compile": torch.compile(fn, dynamic=False)}
    per_call = {name: time_cuda_graph(f, inputs, calls_per_graph=20) for name, f in contenders.items()}
    replay = {name: time_cuda_graph(f, inputs) for name, f in contenders.items()}
    print("time      CUDA-graph replay, median of 200: per call in a graph of 20 calls | one call per graph")
    for name in contenders:
        ratio = "" if name == "lamina" else f"   ({per_call[name] / per_call['lamina']:.2f}x lamina's time)"
        print(f"  {name:14s} {per_call[name]:8.2f} us | {replay[name]:8.2f} us{ratio}")

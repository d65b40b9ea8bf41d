"""Time fp32 contractions multiplied on the tensor cores (three tf32 products) beside FMAs and cuBLAS.

    python experiments/tensor_cores/tensor_core_experiment.py --out experiments/tensor_cores/DATE_GPU_tensor_core_experiment.json

For each linear of the benchmark suite at M = 128 and 2048, and the product ``q @ k^T`` of
the attention scores at S = 2048, it times by CUDA-graph replay (median): cuBLAS SGEMM
through eager PyTorch (TF32 off, PyTorch's default), lamina with ``tensor_cores = 0``
(the FMA kernels the cost model chooses), and lamina with ``tensor_cores = 1`` (``mma.sync``)
and ``2`` (``wgmma``) in the settings of ``SETTINGS``. Next to each time it gives the error against a float64 product
(the norm of the difference over the norm of the product), so that the tensor cores'
three tf32 products can be compared with cuBLAS's float32 FMAs for accuracy as well as speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import time_cuda_graph

LINEARS = {"tl.qkv": (2560, 2048), "tl.o": (2048, 2048), "tl.gate_up": (11264, 2048), "tl.down": (2048, 5632),
           "qw.qkv": (4608, 3584), "qw.o": (3584, 3584), "qw.gate_up": (37888, 3584), "qw.down": (3584, 18944)}
"""(N, K) of each linear of the suite (without Qwen's qkv bias)."""
SCORES = {"tl.scores": (32, 64), "qw.scores": (28, 128)}
"""(heads, head size) of each model's attention; the product is ``q @ k^T`` at S = 2048."""
SETTINGS = {
    "tc chosen": {"tensor_cores": 1},
    "tc 128x128 t8x8": {"tensor_cores": 1, "block_m": 128, "block_n": 128, "thread_m": 8, "thread_n": 8},
    "tc 128x128 t8x8 k32": {"tensor_cores": 1, "block_m": 128, "block_n": 128, "thread_m": 8, "thread_n": 8,
                            "block_k": 32},
    "tc 128x64 t8x8": {"tensor_cores": 1, "block_m": 128, "block_n": 64, "thread_m": 8, "thread_n": 8},
    "tc 64x128 t8x8": {"tensor_cores": 1, "block_m": 64, "block_n": 128, "thread_m": 8, "thread_n": 8},
    "tc 64x128 t8x8 k32": {"tensor_cores": 1, "block_m": 64, "block_n": 128, "thread_m": 8, "thread_n": 8,
                           "block_k": 32},
    "tc 128x64 t8x8 k32": {"tensor_cores": 1, "block_m": 128, "block_n": 64, "thread_m": 8, "thread_n": 8,
                           "block_k": 32},
    "tc 64x64 t4x4": {"tensor_cores": 1, "block_m": 64, "block_n": 64, "thread_m": 4, "thread_n": 4},
    "wgmma chosen": {"tensor_cores": 2},
    "wgmma 128x128": {"tensor_cores": 2, "block_m": 128, "block_n": 128},
    "wgmma 128x64": {"tensor_cores": 2, "block_m": 128, "block_n": 64},
    "wgmma 64x128": {"tensor_cores": 2, "block_m": 64, "block_n": 128},
    "wgmma 64x64": {"tensor_cores": 2, "block_m": 64, "block_n": 64},
    "wgmma 128x128 two buffers": {"tensor_cores": 2, "block_m": 128, "block_n": 128, "buffers": 2},
    "wgmma 128x64 two buffers": {"tensor_cores": 2, "block_m": 128, "block_n": 64, "buffers": 2},
    "wgmma 128x64 three buffers": {"tensor_cores": 2, "block_m": 128, "block_n": 64, "buffers": 3},
}
SMALL_SETTINGS = ("tc chosen", "tc 128x64 t8x8", "tc 64x64 t4x4", "wgmma chosen", "wgmma 64x64")
"""The settings timed at M = 128, where larger blocks leave most SMs idle."""


def linear(x, w):
    return F.linear(x, w)


def scores_product(q, k):
    return torch.matmul(q, k.transpose(-1, -2))


def error(out: torch.Tensor, reference: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(out.double() - reference) / torch.linalg.vector_norm(reference))


def cases():
    for m in (128, 2048):
        for name, (n, k) in LINEARS.items():
            yield f"{name}.m{m}", linear, (m, n, k), lambda m=m, n=n, k=k: (
                torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda") / k ** 0.5)
    for name, (heads, size) in SCORES.items():
        yield name, scores_product, (2048, 2048, size), lambda heads=heads, size=size: (
            torch.randn(1, heads, 2048, size, device="cuda"), torch.randn(1, heads, 2048, size, device="cuda"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--case", action="append", help="time only cases whose name starts with this")
    parser.add_argument("--setting", action="append", choices=sorted(SETTINGS),
                        help="time only these tensor-core settings (and the FMA kernels)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/tensor_cores/tensor_core_experiment.py needs a CUDA GPU", file=sys.stderr)
        return 2
    command = f"python experiments/tensor_cores/tensor_core_experiment.py --out experiments/tensor_cores/{Path(args.out).name} " \
              f"--replays {args.replays}" + "".join(f" --case {c}" for c in args.case or ()) \
              + "".join(f" --setting '{s}'" for s in args.setting or ())
    record = {"command": command, "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "method": "CUDA-graph replay, median; error = |out - float64| / |float64| (Frobenius norms)",
              "rows": []}
    for name, fn, (m, n, k), make in cases():
        if args.case and not any(name.startswith(c) for c in args.case):
            continue
        inputs = make()
        reference = fn(*(t.double() for t in inputs))
        flops = 2 * m * n * k * (inputs[0].shape[1] if fn is scores_product else 1)
        cublas = time_cuda_graph(fn, inputs, replays=args.replays)
        row = {"case": name, "cublas_us": cublas, "cublas_error": error(fn(*inputs), reference), "settings": {}}
        print(f"{name}: cuBLAS {cublas:.1f} us ({flops / cublas / 1e6:.1f} TFLOP/s), "
              f"error {row['cublas_error']:.2e}", flush=True)
        chosen = {"fma chosen": {"tensor_cores": 0}} | {
            label: knobs for label, knobs in SETTINGS.items()
            if (m > 128 or label in SMALL_SETTINGS) and (not args.setting or label in args.setting)}
        for label, knobs in chosen.items():
            compiled = lamina.Compiler(knobs=knobs).compile(fn, inputs)
            wrong = error(compiled(*inputs), reference)
            us = time_cuda_graph(compiled, inputs, replays=args.replays)
            row["settings"][label] = {"knobs": knobs, "us": us, "error": wrong}
            print(f"  {label:22s} {us:9.1f} us  {cublas / us:5.2f}x cuBLAS  {flops / us / 1e6:5.1f} TFLOP/s  "
                  f"error {wrong:.2e}", flush=True)
        record["rows"].append(row)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time the contraction schedule's settings on the GPU beside the cost model's estimates.

    python experiments/contraction_tiling/contraction_sweep.py --out experiments/contraction_tiling/DATE_GPU_contraction_sweep.json

For each fp32 linear of the suite's models, the cost model's candidate settings are
ranked by estimate; the best ``--top`` of them are compiled with every knob pinned and
timed by CUDA-graph replay (median), next to cuBLAS through eager PyTorch. The record
says where the model's own choice lands among the measured settings: the evidence for
(or against) its efficiency table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import attrs
import torch
import torch.nn.functional as F

import lamina
from lamina.backends.cuda.plugin import SM90
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.plugins.schedules.contraction import cost
from lamina.plugins.schedules.contraction.recognise import analyse

SHAPES = {
    "tinyllama.qkv": (2560, 2048), "tinyllama.o": (2048, 2048), "tinyllama.down": (2048, 5632),
    "qwen.qkv": (4608, 3584), "qwen.o": (3584, 3584), "qwen.down": (3584, 18944),
}
"""(N, K) of each linear; M is the sequence length."""


def linear(x, w):
    return F.linear(x, w)


def sweep_shape(name: str, m: int, n: int, k: int, top: int, replays: int) -> dict:
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") / k ** 0.5
    default = lamina.compile(linear, (x, w))
    (kernel,) = default.compilation.loop.kernels
    contraction = analyse(kernel)
    settings = cost.candidates(contraction, SM90)
    ranked = sorted(settings, key=lambda s: cost.estimate(contraction, s, SM90).total_us)[:top]
    chosen, _, _ = cost.choose(contraction, SM90, {}, name)
    reference = linear(x.double(), w.double())
    flops = 2 * m * n * k
    rows = []
    for setting in ranked:
        knobs = {key: value for key, value in attrs.asdict(setting).items() if value is not None}
        compiled = lamina.Compiler(knobs=knobs).compile(linear, (x, w))
        error = relative_error(compiled(x, w), reference)
        us = time_cuda_graph(compiled, (x, w), replays=replays)
        rows.append({"knobs": knobs, "estimate_us": cost.estimate(contraction, setting, SM90).total_us,
                     "measured_us": us, "tflops": flops / us / 1e6, "relative_error": error,
                     "chosen": setting == chosen})
    cublas = time_cuda_graph(linear, (x, w), replays=replays)
    best = min(rows, key=lambda r: r["measured_us"])
    return {"case": name, "m": m, "n": n, "k": k, "cublas_us": cublas, "cublas_tflops": flops / cublas / 1e6,
            "best_measured": best, "chosen_measured": next((r for r in rows if r["chosen"]), None),
            "settings": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--m", type=int, nargs="+", default=[128, 2048])
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--replays", type=int, default=50)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/contraction_tiling/contraction_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    command = f"python experiments/contraction_tiling/contraction_sweep.py --out experiments/contraction_tiling/{Path(args.out).name} " \
              f"--m {' '.join(map(str, args.m))} --top {args.top} --replays {args.replays}"
    record = {"command": command, "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "method": "CUDA-graph replay, median; every knob pinned", "cases": []}
    for m in args.m:
        for name, (n, k) in SHAPES.items():
            case = sweep_shape(f"{name}.m{m}", m, n, k, args.top, args.replays)
            record["cases"].append(case)
            Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
            chosen = case["chosen_measured"]
            print(f"{case['case']}: cuBLAS {case['cublas_us']:.1f} us; best {case['best_measured']['measured_us']:.1f} us "
                  f"{case['best_measured']['knobs']}; chosen "
                  f"{'%.1f us' % chosen['measured_us'] if chosen else 'not among the top'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time fp32 linears with the contraction's block and register tiles pinned, beside cuBLAS.

    python experiments/contraction_tiling/register_tile_sweep.py --out experiments/contraction_tiling/DATE_GPU_register_tile_sweep.json

The cost model considers square register tiles of up to 8 x 8. This sweep times the
default 128 x 128 block of 8 x 8 tiles against larger, rectangular register tiles (8 x 16
and 16 x 8, as cuBLAS's 255-register kernels use) on M = 2048 linears of TinyLlama and
Qwen2.5-7B, and one at M = 128: the evidence for keeping them out of the candidates.
``--knobs '{"block_k": 32}'`` (repeatable) times those settings instead, and ``--shape``
(repeatable) only the linears named.
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
from lamina.bench.measure import relative_error, time_cuda_graph

SHAPES = {"tl.o": (2048, 2048, 2048), "tl.down": (2048, 2048, 5632), "qw.o": (2048, 3584, 3584),
          "qw.qkv": (2048, 4608, 3584), "tl.o.m128": (128, 2048, 2048), "qw.down": (2048, 3584, 18944),
          "qw.gate_up": (2048, 37888, 3584), "tl.qkv": (2048, 2560, 2048), "tl.gate_up": (2048, 11264, 2048),
          "tl.qkv.m128": (128, 2560, 2048), "tl.gate_up.m128": (128, 11264, 2048), "tl.down.m128": (128, 2048, 5632),
          "qw.qkv.m128": (128, 4608, 3584), "qw.o.m128": (128, 3584, 3584), "qw.gate_up.m128": (128, 37888, 3584),
          "qw.down.m128": (128, 3584, 18944)}
"""(M, N, K) of each linear of the benchmark suite (without Qwen's qkv bias); the first seven are swept
unless ``--shape`` names others."""
DEFAULT_SHAPES = list(SHAPES)[:7]
SETTINGS = [
    dict(block_m=128, block_n=128, thread_m=8, thread_n=8),
    dict(block_m=128, block_n=128, thread_m=8, thread_n=16),
    dict(block_m=128, block_n=128, thread_m=16, thread_n=8),
    dict(block_m=128, block_n=256, thread_m=8, thread_n=16),
    dict(block_m=256, block_n=128, thread_m=16, thread_n=8),
    dict(block_m=128, block_n=128, thread_m=8, thread_n=16, block_k=8),
    dict(block_m=128, block_n=256, thread_m=8, thread_n=16, block_k=8),
    dict(block_m=64, block_n=256, thread_m=8, thread_n=16),
]


def linear(x, w):
    return F.linear(x, w)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--knobs", action="append", type=json.loads, metavar="JSON",
                        help="a setting to time (pinned knobs as a JSON object), instead of the register tiles")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="time only these linears")
    args = parser.parse_args(argv)
    settings = args.knobs or SETTINGS
    if not torch.cuda.is_available():
        print("experiments/contraction_tiling/register_tile_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    command = f"python experiments/contraction_tiling/register_tile_sweep.py --out experiments/contraction_tiling/{Path(args.out).name} " \
              f"--replays {args.replays}" + "".join(f" --knobs '{json.dumps(k)}'" for k in args.knobs or ()) \
              + "".join(f" --shape {s}" for s in args.shape or ())
    record = {"command": command, "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "method": "CUDA-graph replay, median; splits 1 and fragment width 4 pinned with each setting",
              "rows": []}
    for name, (m, n, k) in SHAPES.items():
        if name not in (args.shape or DEFAULT_SHAPES):
            continue
        x = torch.randn(m, k, device="cuda")
        w = torch.randn(n, k, device="cuda") / k ** 0.5
        reference = linear(x.double(), w.double())
        cublas = time_cuda_graph(linear, (x, w), replays=args.replays)
        print(name, "cublas", round(cublas, 1), flush=True)
        for setting in settings:
            knobs = dict(splits=1, fragment_width=4, **setting)
            compiled = lamina.Compiler(knobs=knobs).compile(linear, (x, w))
            error = relative_error(compiled(x, w), reference)
            us = time_cuda_graph(compiled, (x, w), replays=args.replays)
            record["rows"].append(dict(shape=name, knobs=knobs, us=us, cublas=cublas, err=error))
            print("  ", setting, round(us, 1), f"{cublas / us:.2f}x", f"{error:.1e}", flush=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

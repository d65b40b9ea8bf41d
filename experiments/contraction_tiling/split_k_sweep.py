"""Time skinny fp32 linears with split-K pinned to each usable slice count, beside the rule's own choice.

    python experiments/contraction_tiling/split_k_sweep.py --out experiments/contraction_tiling/DATE_GPU_split_k_sweep.json

For each linear of the suite's models at ``--m`` rows, lamina compiles it with the knob
``split_k`` pinned to 1 (never split) and to every slice count the rule may use, and once
unpinned; each is timed by CUDA-graph replay (median) next to cuBLAS through eager
PyTorch. The record shows whether the cost model's choice of slices is the fastest.
``--tiling JSON`` (repeatable) pins those contraction knobs, e.g. ``{"block_m": 128,
"block_n": 128}``, with every slice count; ``--case`` times only the named linears.
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
from lamina.plugins.schedules.contraction.split_k.fusion_rule import usable_splits

SHAPES = {
    "tinyllama.qkv": (2560, 2048), "tinyllama.o": (2048, 2048), "tinyllama.gate_up": (11264, 2048),
    "tinyllama.down": (2048, 5632), "qwen.qkv": (4608, 3584), "qwen.o": (3584, 3584),
    "qwen.gate_up": (37888, 3584), "qwen.down": (3584, 18944),
}
"""(N, K) of each linear."""


def linear(x, w):
    return F.linear(x, w)


def tile_note(compiled, key: str) -> str | None:
    """The first note ``key`` in the Tile IR of ``compiled``'s kernels, or None."""
    for tile in compiled.compilation.tiles:
        for name, value in tile.knobs:
            if name == key:
                return str(value)
    return None


def chosen_splits(compiled) -> int:
    """The slices the rule chose: the partial kernel's slice loop, or 1."""
    note = tile_note(compiled, "split_k")
    return int(note.split()[0]) if note else 1


def chosen_setting(compiled) -> str:
    """The contraction's setting, as its Tile IR names it."""
    return (tile_note(compiled, "chosen") or "").split(";")[0]


def sweep_shape(name: str, m: int, n: int, k: int, settings: list[int], tilings: list[dict], replays: int) -> dict:
    x = torch.randn(m, k, device="cuda")
    w = torch.randn(n, k, device="cuda") / k ** 0.5
    reference = linear(x.double(), w.double())
    rows = []
    for tiling in tilings:
        for splits in [None] + [s for s in settings if s == 1 or s in usable_splits(k)]:
            knobs = dict(tiling) if splits is None else {**tiling, "split_k": splits}
            compiled = lamina.Compiler(knobs=knobs).compile(linear, (x, w))
            rows.append({"tiling": tiling, "split_k": "chosen" if splits is None else splits,
                         "splits": chosen_splits(compiled), "chosen": chosen_setting(compiled),
                         "measured_us": time_cuda_graph(compiled, (x, w), replays=replays),
                         "relative_error": relative_error(compiled(x, w), reference)})
    cublas = time_cuda_graph(linear, (x, w), replays=replays)
    return {"case": name, "m": m, "n": n, "k": k, "cublas_us": cublas, "settings": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--tiling", action="append", type=json.loads, metavar="JSON",
                        help="contraction knobs pinned with every slice count (default: the cost model's tiling)")
    parser.add_argument("--case", action="append", choices=sorted(SHAPES), help="time only these linears")
    args = parser.parse_args(argv)
    tilings = args.tiling or [{}]
    if not torch.cuda.is_available():
        print("experiments/contraction_tiling/split_k_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    command = (f"python experiments/contraction_tiling/split_k_sweep.py --out experiments/contraction_tiling/{Path(args.out).name} --m {args.m} "
               f"--splits {' '.join(map(str, args.splits))} --replays {args.replays}"
               + "".join(f" --tiling '{json.dumps(t)}'" for t in args.tiling or ())
               + "".join(f" --case {c}" for c in args.case or ()))
    record = {"command": command, "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "cases": []}
    for name, (n, k) in SHAPES.items():
        if args.case and name not in args.case:
            continue
        case = sweep_shape(name, args.m, n, k, args.splits, tilings, args.replays)
        record["cases"].append(case)
        timings = "  ".join(f"{r['tiling'] or ''}{r['split_k']}({r['splits']}): {r['measured_us']:.1f}"
                            for r in case["settings"])
        print(f"{name} M={args.m}: cuBLAS {case['cublas_us']:.1f} us; {timings}", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time the decode schedule's settings against eager SDPA: key ranges, tiles and stages.

    python experiments/decode_combining/sweep.py --out experiments/decode_combining/DATE_GPU_LABEL.json

One bf16 query per head against 512, 4 096 and 32 768 cached positions with the heads of
TinyLlama (32 query / 4 key-value heads, 64 features), Qwen2.5-7B (28 / 4, 128) and Gemma-2B
(8 / 1, 256), products on the tensor cores. For each: eager SDPA and the cost model's choice,
then every key range of 64 to 4 096 keys with the tiles and stages of ``--grid`` pinned
(``small``: tiles of 64 keys, 2 stages; ``full``: tiles of 64 and 128 keys, 2 and 4 stages).
Times are CUDA-graph replays of ten calls (median), so that each is the kernel's time and the
gaps between calls, not the graph's launch. A pinned setting that does not fit leaves the attention
to the other schedules (the record's ``schedules`` say so). ``--compile-only`` compiles every setting
and times nothing (run in parallel processes first, it fills the program cache that the timed run reads).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error, time_cuda_graph

CASES = {"tinyllama": (32, 4, 64), "qwen": (28, 4, 128), "gemma": (8, 1, 256)}
CACHES = (512, 4096, 32768)
RANGES = (64, 128, 256, 512, 1024, 2048, 4096)
GRIDS = {"small": [(64, 2)], "full": [(64, 2), (64, 4), (128, 2), (128, 4)]}


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def settings(cache: int, grid: str) -> list[dict]:
    pinned = [{"keys_per_block": r, "keys_per_tile": tile, "stages": stages}
              for tile, stages in GRIDS[grid] for r in RANGES
              if r <= cache and r % tile == 0 and (stages == 2 or stages <= r // tile)]
    return [{"products": "tensor_cores"}] + [{"products": "tensor_cores", **p} for p in pinned]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--cache", action="append", type=int, choices=CACHES)
    parser.add_argument("--grid", choices=sorted(GRIDS), default="full")
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/decode_combining/sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": " ".join(["python", *sys.argv]), "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "cases": []}
    for name, (heads, kv_heads, depth) in CASES.items():
        if args.case and name not in args.case:
            continue
        for cache in args.cache or CACHES:
            torch.manual_seed(cache)
            q = torch.randn(1, heads, 1, depth, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(1, kv_heads, cache, depth, dtype=torch.bfloat16, device="cuda")
            v = torch.randn_like(k)
            inputs = (q, k, v)
            reference = None if args.compile_only else float64_reference(attention, inputs)
            row = {"case": f"{name}.c{cache}", "cache_bytes": 2 * k.numel() * 2, "settings": []}
            if not args.compile_only:
                row["eager_us"] = time_cuda_graph(attention, inputs, replays=50, calls_per_graph=10)
                row["eager_error"] = relative_error(attention(*inputs), reference)
            for knobs in settings(cache, args.grid):
                compiled = lamina.compile(attention, inputs, knobs={"attention_decode": knobs})
                chosen = dict(compiled.compilation.tiles[0].knobs).get("chosen", "")
                if args.compile_only:
                    continue
                row["settings"].append({"knobs": knobs, "chosen": chosen,
                                        "schedules": [t.schedule for t in compiled.compilation.tiles],
                                        "us": time_cuda_graph(compiled, inputs, replays=50, calls_per_graph=10),
                                        "error": relative_error(compiled(*inputs), reference)})
            if args.compile_only:
                print(f"{row['case']}: compiled", flush=True)
                continue
            record["cases"].append(row)
            decoding = [s for s in row["settings"][1:] if s["schedules"] == ["attention_decode"]]
            best = min(decoding, key=lambda s: s["us"])
            print(f"{row['case']}: eager {row['eager_us']:.1f} us; cost model {row['settings'][0]['us']:.1f} "
                  f"({row['settings'][0]['chosen'].split(';')[0]}); best pinned {best['us']:.1f} {best['knobs']}",
                  flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

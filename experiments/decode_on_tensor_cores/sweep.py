"""Time the decode schedule's products on the CUDA cores and on the tensor cores against eager SDPA.

    python experiments/decode_on_tensor_cores/sweep.py --out experiments/decode_on_tensor_cores/DATE_GPU_sweep.json

One bf16 query per head against 512, 4 096 and 32 768 cached positions, with the heads of
TinyLlama (32 query / 4 key-value heads, 64 features), Qwen2.5-7B (28 / 4, 128) and Gemma-2B
(8 / 1, 256). For each, CUDA-graph replay (median of graphs of ten calls) of eager SDPA, of the
cost model's choice with ``products`` pinned to each value, and of the tensor cores with the
key ranges pinned to each length (tiles of 64 keys, 2 stages): the record shows how far each
is from eager and from reading the cache at the GPU's bandwidth.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error

CASES = {"tinyllama": (32, 4, 64), "qwen": (28, 4, 128), "gemma": (8, 1, 256)}
CACHES = (512, 4096, 32768)
RANGES = (64, 128, 256, 512, 1024)


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def graph_us(fn, args, replays: int = 100) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            fn(*args)
    times = []
    for _ in range(replays // 10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / 10)
    return sorted(times)[len(times) // 2]


def chosen(compiled) -> str:
    return dict(compiled.compilation.tiles[0].knobs).get("chosen", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("experiments/decode_on_tensor_cores/sweep.py needs a CUDA GPU", file=sys.stderr)
        return 2
    record = {"command": f"python experiments/decode_on_tensor_cores/sweep.py --out experiments/decode_on_tensor_cores/"
                         f"{Path(args.out).name}" + "".join(f" --case {c}" for c in args.case or ()),
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
    for name, (heads, kv_heads, depth) in CASES.items():
        if args.case and name not in args.case:
            continue
        for cache in CACHES:
            torch.manual_seed(cache)
            q = torch.randn(1, heads, 1, depth, dtype=torch.bfloat16, device="cuda")
            k = torch.randn(1, kv_heads, cache, depth, dtype=torch.bfloat16, device="cuda")
            v = torch.randn_like(k)
            reference = float64_reference(attention, (q, k, v))
            row = {"case": f"{name}.c{cache}", "cache_bytes": 2 * k.numel() * 2,
                   "eager_us": graph_us(attention, (q, k, v)), "eager_error": relative_error(attention(q, k, v), reference), "settings": []}
            settings = [{"products": p} for p in ("cuda_cores", "tensor_cores")]
            settings += [{"products": "tensor_cores", "keys_per_block": r, "keys_per_tile": 64, "stages": 2}
                         for r in RANGES if r <= cache]
            for knobs in settings:
                compiled = lamina.compile(attention, (q, k, v), knobs={"attention_decode": knobs})
                row["settings"].append({"knobs": knobs, "chosen": chosen(compiled),
                                        "us": graph_us(compiled, (q, k, v)),
                                        "error": relative_error(compiled(q, k, v), reference)})
            record["cases"].append(row)
            print(f"{row['case']}: eager {row['eager_us']:.1f} us; " + "; ".join(
                f"{'/'.join(str(x) for x in s['knobs'].values())} {s['us']:.1f}" for s in row["settings"]), flush=True)
            Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

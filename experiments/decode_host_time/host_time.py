"""Where the host's time goes in a decoding step of ``model.generate`` through lamina.

    python experiments/decode_host_time/host_time.py --model tinyllama [--layers N] [--out FILE]

Greedy generation with a static cache after a 128-token prompt, as ``lamina run --generate``
runs it (``torch.compile(model.forward, backend="lamina", mode="reduce-overhead")``). A step is
the difference of two generations (``--short`` and ``--long`` new tokens) over the tokens between
them. Timers wrap the layers of a call, outermost first: the compiled ``forward`` (Dynamo's guards,
AOTAutograd's wrappers, lamina), lamina's CUDA-graph replay, and the replay of the graph alone;
then a cProfile of one long generation lists the Python functions that cost most.
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import io
import json
import pstats
import sys
import time

import torch

from lamina.integrations import cuda_graphs
from lamina.models.builder import build_model
from lamina.models.configs import MODELS

PROMPT = 128
spent: dict[str, float] = collections.defaultdict(float)
calls: dict[str, int] = collections.defaultdict(int)


def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start
            calls[name] += 1
    return wrapper


def generate(model, ids, tokens):
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=tokens, min_new_tokens=tokens,
                    do_sample=False, cache_implementation="static", pad_token_id=0, disable_compile=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, **settings)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tinyllama", choices=sorted(MODELS))
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--short", type=int, default=8)
    parser.add_argument("--long", type=int, default=72)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    config = MODELS[args.model]
    model = build_model(config, num_layers=args.layers, dtype=torch.bfloat16, device="cuda", seed=0).model
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0)).cuda()
    cuda_graphs.CudaGraphReplay.__call__ = timed("lamina CudaGraphReplay.__call__", cuda_graphs.CudaGraphReplay.__call__)
    cuda_graphs._Recording.replay = timed("lamina _Recording.replay", cuda_graphs._Recording.replay)
    cuda_graphs._Recording.moved = timed("lamina _Recording.moved", cuda_graphs._Recording.moved)
    torch.cuda.CUDAGraph.replay = timed("CUDAGraph.replay", torch.cuda.CUDAGraph.replay)
    compiled = torch.compile(model.forward, backend="lamina", mode="reduce-overhead")
    model.forward = timed("compiled forward", compiled)
    record = {"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    with torch.no_grad():
        record["first_call_s"] = generate(model, ids, args.long)
        for tokens in (args.short, args.long):
            generate(model, ids, tokens)
        walls = {}
        before = {}
        for tokens in (args.short, args.long):
            spent.clear(); calls.clear()
            walls[tokens] = generate(model, ids, tokens)
            before[tokens] = (dict(spent), dict(calls))
        steps = args.long - args.short
        record["step_us"] = (walls[args.long] - walls[args.short]) / steps * 1e6
        record["per_step_us"] = {name: (before[args.long][0][name] - before[args.short][0].get(name, 0.0)) / steps * 1e6
                                 for name in before[args.long][0]}
        record["calls_per_step"] = {name: (before[args.long][1][name] - before[args.short][1].get(name, 0)) / steps
                                    for name in before[args.long][1]}
        profiler = cProfile.Profile()
        profiler.enable()
        generate(model, ids, args.long)
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(45)
    record["cprofile_tottime"] = text.getvalue()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(60)
    record["cprofile_cumulative"] = text.getvalue()
    print(json.dumps({k: v for k, v in record.items() if not k.startswith("cprofile")}, indent=1))
    print(record["cprofile_tottime"])
    print(record["cprofile_cumulative"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

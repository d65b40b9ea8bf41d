"""Where a decoding step of ``model.generate`` spends its time, in lamina and in torch.compile.

    python benchmarks/profile_decode.py --model tinyllama --out benchmarks/results/DATE_h200_profile_decode_tinyllama_bf16.json

Greedy generation with a static cache after a random 128-token prompt, as ``lamina run
--generate`` runs it: lamina is ``torch.compile(model.forward, backend="lamina",
mode="reduce-overhead")``, torch.compile is what ``transformers`` compiles by itself. Each
contender generates once to compile (the longer generation first, whose cache the shorter
ones reuse where ``transformers`` keeps the largest cache size), then twice more at each of
two lengths (``--short`` and ``--long`` new tokens); the difference between the two lengths,
divided by the tokens between them, is one decoding step: its wall time (unprofiled), the
GPU time of each kernel (what it adds to the GPU's busy time, as ``profile_model`` counts it) and
its launches (torch.profiler), and the host time of the ops and
calls that cost most. The prompt's step cancels out.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
import time
from pathlib import Path

import torch

from lamina.models.builder import build_model
from lamina.models.configs import MODELS
from profile_model import own_times

PROMPT = 128
SHOWN = 20
"""Kernels printed per contender, the costliest first (the record keeps 40, and 30 host entries)."""


def _generate(model, ids, new_tokens, transformers_compiles, profiled=False):
    """Seconds of one ``generate`` call, and its profile where ``profiled``."""
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, cache_implementation="static", pad_token_id=0,
                    disable_compile=not transformers_compiles)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) if profiled else contextlib.nullcontext() as profiler:
        start = time.perf_counter()
        model.generate(ids, **settings)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return seconds, profiler


def _kernels(profiler) -> tuple[dict[str, float], dict[str, int]]:
    """Each kernel name's time (what it adds to the GPU's busy time: ``profile_model.own_times``) and launches."""
    kernels = [(event.name, event.time_range.start, event.time_range.end) for event in profiler.events()
               if event.device_type == torch.autograd.DeviceType.CUDA]
    us: dict[str, float] = collections.defaultdict(float)
    launches: dict[str, int] = collections.defaultdict(int)
    for name, own in own_times(kernels):
        us[name] += own
        launches[name] += 1
    return us, launches


def profile(model, ids, transformers_compiles: bool, short: int, long: int) -> dict:
    with torch.no_grad():
        started = time.perf_counter()
        _generate(model, ids, long, transformers_compiles)
        first_call_s = time.perf_counter() - started
        walls = {}
        for tokens in (short, long):
            _generate(model, ids, tokens, transformers_compiles)
            walls[tokens] = _generate(model, ids, tokens, transformers_compiles)[0]
        profiles = {tokens: _kernels(_generate(model, ids, tokens, transformers_compiles, profiled=True)[1])
                    for tokens in (short, long)}
        host = _generate(model, ids, long, transformers_compiles, profiled=True)[1]
    steps = long - short
    (us_short, launches_short), (us_long, launches_long) = profiles[short], profiles[long]
    us = {k: (us_long[k] - us_short.get(k, 0.0)) / steps for k in us_long}
    launches = {k: (launches_long[k] - launches_short.get(k, 0)) / steps for k in launches_long}
    rows = sorted(us.items(), key=lambda item: -item[1])
    host_rows = sorted(((e.key, e.cpu_time_total / long) for e in host.key_averages()), key=lambda item: -item[1])
    return {
        "first_call_s": first_call_s,
        "step_ms": (walls[long] - walls[short]) / steps * 1e3,
        "gpu_us_per_step": sum(us.values()),
        "launches_per_step": sum(launches.values()),
        "kernels": [{"kernel": name, "us_per_step": t, "launches_per_step": launches[name]} for name, t in rows[:40]],
        "host_us_per_token_profiled": [{"name": name, "us": t} for name, t in host_rows[:30]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=sorted(MODELS))
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (all of the model's if left out)")
    parser.add_argument("--short", type=int, default=8, help="new tokens of the shorter generation")
    parser.add_argument("--long", type=int, default=72, help="new tokens of the longer generation")
    parser.add_argument("--no-inductor", action="store_true", help="profile lamina alone")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/profile_decode.py needs a CUDA GPU", file=sys.stderr)
        return 2
    if not 1 <= args.short < args.long:
        print("--short must be at least 1 and less than --long", file=sys.stderr)
        return 2
    config = MODELS[args.model]
    model = build_model(config, num_layers=args.layers, dtype=torch.bfloat16, device="cuda", seed=0).model
    ids = torch.randint(0, config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(0)).cuda()
    record = {
        "command": (f"python benchmarks/profile_decode.py --model {args.model}"
                    + (f" --layers {args.layers}" if args.layers else "")
                    + f" --short {args.short} --long {args.long}" + (" --no-inductor" if args.no_inductor else "")
                    + f" --out benchmarks/results/{Path(args.out).name}"),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "model": {"name": args.model, "layers": args.layers or config.num_hidden_layers, "dtype": "bfloat16",
                  "prompt": PROMPT},
    }
    for contender in ["lamina"] + ([] if args.no_inductor else ["torch.compile"]):
        torch._dynamo.reset()
        if contender == "lamina":
            model.forward = torch.compile(model.forward, backend="lamina", mode="reduce-overhead")
        try:
            found = record[contender] = profile(model, ids, contender == "torch.compile", args.short, args.long)
        finally:
            if contender == "lamina":
                del model.forward
        print(f"{contender}: a decoding step takes {found['step_ms']:.3f} ms, {found['gpu_us_per_step']:.1f} us of it "
              f"GPU time in {found['launches_per_step']:.0f} launches")
        for row in found["kernels"][:SHOWN]:
            print(f"  {row['us_per_step']:9.2f} us  x{row['launches_per_step']:<5g} {row['kernel'][:100]}")
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

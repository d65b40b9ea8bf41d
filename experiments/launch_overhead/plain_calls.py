"""Host time of plain calls (no CUDA graph) of a model compiled by lamina, as ``model(**inputs)``
is called: the median wall time of 20 calls, each waited for, against eager's, and the lamina
functions that took the most time in 10 profiled calls.

    python experiments/launch_overhead/plain_calls.py --arch gpt2 [--profile]
"""
import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

from lamina.models.architectures import architecture, build, example_inputs


def median_us(call, calls: int = 20) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="gpt2")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    arch = architecture(args.arch)
    model = build(arch, size="real", dtype=torch.bfloat16, device="cuda", length=args.length)
    inputs = example_inputs(arch, model, length=args.length, device="cuda")
    compiled = torch.compile(model, backend="lamina", dynamic=False)
    with torch.no_grad():
        start = time.perf_counter()
        compiled(**inputs)
        torch.cuda.synchronize()
        print(f"{args.arch}: first call {time.perf_counter() - start:.1f} s")
        for _ in range(3):
            compiled(**inputs)
        print(f"plain call, median of 20: lamina {median_us(lambda: compiled(**inputs)):.0f} us, "
              f"eager {median_us(lambda: model(**inputs)):.0f} us")
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(10):
                compiled(**inputs)
            torch.cuda.synchronize()
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
            print(text.getvalue())


if __name__ == "__main__":
    main()

"""Whether RoPE gains from loading both halves before its branch.

The pointwise schedule loads a vector that only one side of a ``where`` reads inside that
side's branch. In RoPE, ``where(i3 < 32, -q[..., i3 + 32], q[..., i3 - 32])`` takes both sides
within one warp, so the warp runs both branches one after the other, each with its load.
This times the suite's RoPE cases, by CUDA-graph replay, as lamina compiles them and with
the loads inside the branches moved before them (every index stays in bounds either way),
the CUDA edited before NVRTC compiles it:

    python benchmarks/divergent_loads_experiment.py
"""

import re

import torch

import lamina
from lamina.backends.cuda import backend
from lamina.bench.measure import time_cuda_graph
from lamina.bench.suite import builtin_suite

CASES = [f"{model}.rope_q.s{s}.fp32" for model in ("tinyllama", "qwen") for s in (1, 128, 2048)]
LOAD = re.compile(r"^\s*\*reinterpret_cast<uint4\*>\(&\w+_vector\d*\[.*\]\) = \*reinterpret_cast<const uint4\*>\(&\w+\[.*\]\);$")


def hoisted(source: str) -> str:
    """The vector loads inside ``if (condition...)`` blocks moved to just before the first such block."""
    lines = source.splitlines()
    branch = next((i for i, line in enumerate(lines) if line.strip().startswith("if (condition")), None)
    if branch is None:
        return source
    indent = len(lines[branch]) - len(lines[branch].lstrip())
    moved = [i for i, line in enumerate(lines) if i > branch and LOAD.match(line)
             and len(line) - len(line.lstrip()) > indent]
    loads = [" " * indent + lines[i].strip() for i in moved]
    kept = [line for i, line in enumerate(lines) if i not in set(moved)]
    return "\n".join(kept[:branch] + loads + kept[branch:]) + "\n"


def main():
    original = backend.emit_cuda
    cases = {c.name: c for c in builtin_suite()}
    for name in CASES:
        case = cases[name]
        fn = case.program().function()
        inputs = case.program().example_inputs(seed=0, device="cuda")
        for variant in ("as compiled", "loads hoisted", "as compiled again"):
            backend.emit_cuda = original if variant != "loads hoisted" else (lambda k: hoisted(original(k)))
            compiled = lamina.compile(fn, inputs)
            error = (compiled(*inputs) - fn(*inputs)).abs().max().item()
            calls = 20 if case.program().example_inputs(seed=0, device="cuda")[0].numel() < 10**6 else 1
            us = time_cuda_graph(compiled, inputs, replays=100, calls_per_graph=calls)
            print(f"{name:26s} {variant:18s} {us:7.2f} us  max abs difference from eager {error:.1e}", flush=True)
        backend.emit_cuda = original


if __name__ == "__main__":
    with torch.no_grad():
        main()

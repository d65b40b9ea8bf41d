"""Whether storing the outputs of large products evict-first (``st.global.cs``) helps.

A product whose output is larger than L2 (attention scores at S = 2048: 470 to 540 MB)
streams it through L2, where it may evict the operand tiles that other blocks would read
again. This times, by CUDA-graph replay, a few suite cases as lamina compiles them and with
every 16-byte store to a kernel's output written with ``__stcs`` instead, the CUDA edited
before NVRTC compiles it:

    python benchmarks/streaming_stores_experiment.py
"""

import re

import torch

import lamina
from lamina.backends.cuda import backend
from lamina.bench.measure import time_cuda_graph
from lamina.bench.suite import builtin_suite

CASES = ["tinyllama.scores.s2048.fp32", "qwen.scores.s2048.fp32", "tinyllama.linear_o.s2048.fp32",
         "qwen.linear_down.s2048.fp32", "tinyllama.silu_mul.s2048.fp32"]
STORE = re.compile(r"^(\s*)\*reinterpret_cast<uint4\*>\(&(\w+)(\[.*\])\) = (\*reinterpret_cast<const uint4\*>\(.*\));$")


def streaming(source: str) -> str:
    signature = source[source.index("__global__"):source.index("{", source.index("__global__"))]
    outputs = set(re.findall(r"(?<!const )float\* __restrict__ (\w+)", signature))
    lines = []
    for line in source.splitlines():
        match = STORE.match(line)
        if match and match.group(2) in outputs:
            indent, array, index, value = match.groups()
            line = f"{indent}__stcs(reinterpret_cast<uint4*>(&{array}{index}), {value});"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main():
    original = backend.emit_cuda
    cases = {c.name: c for c in builtin_suite()}
    for name in CASES:
        case = cases[name]
        fn = case.program().function()
        inputs = case.program().example_inputs(seed=0, device="cuda")
        times = {}
        for variant in ("as compiled", "evict-first", "as compiled again"):
            backend.emit_cuda = original if variant != "evict-first" else (lambda k: streaming(original(k)))
            compiled = lamina.compile(fn, inputs)
            edited = sum(s.count("__stcs") for s in compiled.compilation.sources.values())
            reference = fn(*inputs)
            error = (compiled(*inputs) - reference).abs().max().item()
            times[variant] = time_cuda_graph(compiled, inputs, replays=50)
            print(f"{name:32s} {variant:18s} {times[variant]:9.1f} us  streaming stores: {edited}, "
                  f"max abs difference from eager {error:.1e}", flush=True)
        backend.emit_cuda = original


if __name__ == "__main__":
    with torch.no_grad():
        main()

"""Run suite cases once each inside NVTX ranges, so that Nsight Compute can profile their kernels.

    ncu --clock-control none --nvtx --nvtx-include "regex:measure_.*/" \\
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \\
        python benchmarks/profile_cases.py lamina qwen.rmsnorm.s2048.fp32 qwen.scores.s2048.fp32

The first argument picks the contender: ``lamina`` or ``torch.compile``. Each case is
compiled, called three times to warm up, then called once inside the range
``measure_<case>``; only the kernels of that call fall inside ``--nvtx-include``. By
default ncu flushes the caches before each kernel, so its figures are cold-L2 ones.
"""

from __future__ import annotations

import sys

import torch

import lamina
from lamina.bench.suite import builtin_suite

CONTENDERS = ("lamina", "torch.compile")


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in CONTENDERS:
        print(__doc__, file=sys.stderr)
        return 2
    contender, names = argv[0], argv[1:]
    cases = {c.name: c for c in builtin_suite()}
    unknown = [n for n in names if n not in cases]
    if unknown:
        print(f"no suite case named {', '.join(unknown)}; lamina bench --list shows them", file=sys.stderr)
        return 2
    for name in names:
        fn = cases[name].program().function()
        inputs = cases[name].program().example_inputs(seed=0, device="cuda")
        compiled = lamina.compile(fn, inputs) if contender == "lamina" else torch.compile(fn, dynamic=False)
        for _ in range(3):
            compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"measure_{name}")
        compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

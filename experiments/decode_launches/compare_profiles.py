"""Decoding steps profiled by ``benchmarks/profile_decode.py``, side by side: each contender's step,
its GPU time and launches, and the kernels that cost most.

    python experiments/decode_launches/compare_profiles.py before.json joined.json after.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SHOWN = 14


def main(paths: list[str]) -> None:
    runs = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths}
    print(f"{'run':34s} {'contender':14s} {'step ms':>8s} {'GPU us':>8s} {'launches':>9s}")
    for name, record in runs.items():
        for contender in ("lamina", "torch.compile"):
            side = record.get(contender)
            if side:
                print(f"{name:34s} {contender:14s} {side['step_ms']:8.3f} {side['gpu_us_per_step']:8.1f} "
                      f"{side['launches_per_step']:9.1f}")
    for name, record in runs.items():
        print(f"\n{name}: lamina's costliest kernels (us a step, launches a step)")
        for kernel in record["lamina"]["kernels"][:SHOWN]:
            print(f"  {kernel['kernel'][:60]:60s} {kernel['us_per_step']:8.1f} {kernel['launches_per_step']:6.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])

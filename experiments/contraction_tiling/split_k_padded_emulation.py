"""What unequal split-K slices would gain, emulated with equal ones: K padded up to S whole slices.

    python experiments/contraction_tiling/split_k_padded_emulation.py OUT.json

Each M = 128 linear is timed as the suite runs it (the cost model's choice) and with K
padded to the next multiple of S slices of whole 16-deep k-tiles, split_k pinned to S
(and the block pinned where given): an upper bound on the time of S unequal slices of the
real K, whose longest slice is as long as these.
"""
import json, math, sys
import torch, torch.nn.functional as F
import lamina
from lamina.bench.measure import time_cuda_graph

CASES = [  # name, N, K, slices, pinned block
    ("tinyllama.gate_up", 11264, 2048, 3, {"block_m": 128, "block_n": 128}),
    ("tinyllama.qkv", 2560, 2048, 13, {"block_m": 64, "block_n": 128}),
    ("tinyllama.qkv", 2560, 2048, 6, {"block_m": 128, "block_n": 128}),
    ("qwen.o", 3584, 3584, 9, {"block_m": 128, "block_n": 128}),
    ("qwen.o", 3584, 3584, 19, {"block_m": 64, "block_n": 128}),
    ("qwen.down", 3584, 18944, 9, {"block_m": 128, "block_n": 128}),
]

def linear(x, w):
    return F.linear(x, w)

rows = []
for name, n, k, s, block in CASES:
    padded = math.ceil(k / 16 / s) * 16 * s
    x, w = torch.randn(128, k, device="cuda"), torch.randn(n, k, device="cuda")
    xp, wp = torch.randn(128, padded, device="cuda"), torch.randn(n, padded, device="cuda")
    chosen = time_cuda_graph(lamina.compile(linear, (x, w)), (x, w), replays=50)
    knobs = {**block, "thread_m": 8, "thread_n": 8, "split_k": s}
    emulated = time_cuda_graph(lamina.Compiler(knobs=knobs).compile(linear, (xp, wp)), (xp, wp), replays=50)
    cublas = time_cuda_graph(linear, (x, w), replays=50)
    rows.append(dict(case=name, n=n, k=k, slices=s, padded_k=padded, block=block, chosen_us=chosen,
                     padded_split_us=emulated, cublas_us=cublas))
    print(rows[-1], flush=True)
json.dump({"command": "python experiments/contraction_tiling/split_k_padded_emulation.py "
                      "experiments/contraction_tiling/2026-11-30_h200_split_k_padded_emulation.json",
           "gpu": torch.cuda.get_device_name(), "rows": rows}, open(sys.argv[1], "w"), indent=1)

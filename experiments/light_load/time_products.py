"""BERT-base's four products over a batch of 8 sequences of 128 tokens (q, k and v alike; o with its
residual; the up projection with its GELU; the down projection with its residual), under the
cost model's choice and fixed Hopper GEMM settings, against torch.compile (cuBLAS).
``python experiments/light_load/time_products.py`` on a GPU; writes ``bert_products.json`` under
``$OUT`` (or here). Each figure is the median CUDA-graph replay of 20 calls to a graph, per call."""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "deep_rings"))
from time_rings import setting_name, time_settings  # noqa: E402  (setting_name: fit.py reads it from here)


def setting(block_m, block_n, stages, consumer_warpgroups=1, **more):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n,
            "consumer_warpgroups": consumer_warpgroups, "stages": stages, "split_k": 1} | more


def qkv(x, w, b):
    return F.linear(x, w, b)


def o(x, w, b, r):
    return r + F.linear(x, w, b)


def up(x, w, b):
    return F.gelu(F.linear(x, w, b))


def down(x, w, b, r):
    return r + F.linear(x, w, b)


SETTINGS = [None, setting(64, 96, 4), setting(64, 96, 6), setting(64, 64, 4), setting(64, 64, 6),
            setting(64, 128, 4), setting(128, 64, 4, 2), setting(128, 96, 4), setting(128, 96, 4, 2),
            setting(128, 128, 4, 2), setting(64, 192, 4), setting(64, 256, 3), setting(128, 192, 4, 2),
            setting(128, 256, 3, 2), setting(128, 64, 4, 2, split_k=2), setting(64, 96, 4, split_k=2)]
"""The cost model's choice, then settings of one kernel each (two split in two along k)."""


def cases(device: str) -> dict:
    """Each product's function and its bf16 arguments, random, the weights scaled as a layer's."""
    torch.manual_seed(0)

    def tensor(*shape, scale=1.0):
        return torch.randn(*shape, device=device, dtype=torch.bfloat16) * scale

    batch, length, hidden, inner = 8, 128, 768, 3072
    return {
        "qkv 1024x768x768": (qkv, (tensor(batch, length, hidden), tensor(hidden, hidden, scale=hidden ** -0.5),
                                   tensor(hidden))),
        "o+res 1024x768x768": (o, (tensor(batch, length, hidden), tensor(hidden, hidden, scale=hidden ** -0.5),
                                   tensor(hidden), tensor(batch, length, hidden))),
        "up+gelu 1024x768x3072": (up, (tensor(batch, length, hidden), tensor(inner, hidden, scale=hidden ** -0.5),
                                       tensor(inner))),
        "down+res 1024x3072x768": (down, (tensor(batch, length, inner), tensor(hidden, inner, scale=inner ** -0.5),
                                          tensor(hidden), tensor(batch, length, hidden))),
    }


def main():
    out = time_settings(cases("cuda"), SETTINGS, setting_name)
    with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "bert_products.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

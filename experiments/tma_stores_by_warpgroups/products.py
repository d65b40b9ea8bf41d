"""Which blocks of the 16-bit Hopper GEMM gain from storing their outputs through a shared tile that
the TMA copies out (``wgmma_tma/tma_stores.py``), and which block widths pay: BERT's and TinyLlama's
products at 512 rows, each under the cost model's setting and pinned ones, as emitted and with the
outputs stored from registers, against torch.compile. Run on a GPU: ``python
experiments/tma_stores_by_warpgroups/products.py`` (writes ``products.json`` under ``$OUT``, or here)."""
import json
import os

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import profiled_us, relative_error
from lamina.plugins.schedules.contraction.wgmma_tma import setting

FROM_REGISTERS = [False]
_staged_copy = setting.staged_copy


def _staged_copy_unless_from_registers(c, choices):
    copy = _staged_copy(c, choices)
    return "" if FROM_REGISTERS[0] and copy == setting.TMA_COPY else copy


setting.staged_copy = _staged_copy_unless_from_registers


def pins(block_m, block_n, groups=1):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "stages": 4,
            "consumer_warpgroups": groups}


def bf16(*shape, scale=1.0):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16) * scale


torch.manual_seed(0)
x = bf16(512, 768)
CASES = {
    "bert ffn up gelu 512x768x3072": (lambda x, w, b: F.gelu(F.linear(x, w, b)), (x, bf16(3072, 768, scale=.03), bf16(3072)), [
        pins(128, 112, 2), pins(128, 96), pins(128, 64), pins(128, 128, 2), pins(128, 64, 2), pins(128, 96, 2)]),
    "o 512x2048x2048": (lambda x, w: x @ w.t(), (bf16(512, 2048), bf16(2048, 2048, scale=.02)), [
        pins(128, 64), pins(128, 64, 2)]),
    "o_residual 512x2048x2048": (lambda x, w, r: r + x @ w.t(), (bf16(512, 2048), bf16(2048, 2048, scale=.02),
                                                                 bf16(512, 2048)), []),
    "bert q bias 512x768x768": (lambda x, w, b: F.linear(x, w, b), (x, bf16(768, 768, scale=.03), bf16(768)), [
        pins(64, 64), pins(128, 64, 2)]),
    "llama gate 512x2048x5632": (lambda x, w: x @ w.t(), (bf16(512, 2048), bf16(5632, 2048, scale=.02)), []),
}
results = {}
for case, (fn, args, settings) in CASES.items():
    reference = fn(*(a.double() for a in args))
    results[f"{case} | torch.compile"] = profiled_us(torch.compile(fn), args)
    print(case, "torch.compile", results[f"{case} | torch.compile"], flush=True)
    for pinned in [None, *settings]:
        for from_registers in (False, True):
            FROM_REGISTERS[0] = from_registers
            name = "cost model" if pinned is None else f"{pinned['block_m']}x{pinned['block_n']}, " \
                f"{pinned['consumer_warpgroups']} consumer warpgroups"
            key = f"{case} | {name} | {'registers' if from_registers else 'as emitted'}"
            compiled = lamina.compile(fn, args, knobs={"contraction": pinned} if pinned else {})
            tiles = [t for t in compiled.compilation.tiles if "chosen" in dict(t.knobs)]
            results[key] = {"us": profiled_us(compiled, args), "error": relative_error(compiled(*args), reference),
                            "chosen": [dict(t.knobs)["chosen"].split(";")[0] for t in tiles],
                            "stores": [t.settings.staged_output_copy for t in tiles]}
            print(key, results[key], flush=True)
with open(os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "products.json"), "w") as f:
    json.dump(results, f, indent=1)

"""Where the Hopper GEMM loses to cuBLAS at 512 rows: TinyLlama's and Qwen2.5-7B's products (bf16),
timed under the cost model's setting and pinned ones, each as emitted and in variants, against
torch.compile (cuBLAS, and Inductor's kernel where an epilogue is fused). Run on a GPU: ``python
experiments/gemm_mainloop/variants.py [--variants as_emitted,registers,warp_arrive,setmaxnreg]
[--cases gate,lm_head]``
(writes ``variants.json`` under ``$OUT``, or here).

Variants: ``registers`` stores the outputs from the consumers' registers instead of through a
shared tile by the TMA (``wgmma_tma/tma_stores.py``); two are patches of the CUDA source, applied
here only: ``warp_arrive`` (a stage released by one arrival per consumer warp instead of one per
thread) and ``setmaxnreg`` (the producer warpgroup gives its registers to the consumers)."""
import argparse
import json
import os
import re

import torch

import lamina
import lamina.backends.cuda.backend as cuda_backend
from lamina.bench.measure import profiled_us, relative_error
from lamina.plugins.schedules.contraction.wgmma_tma import setting

PATCHES: set[str] = set()
_emit = cuda_backend.emit_cuda


def _patched(kernel):
    source = _emit(kernel)
    if "warp_arrive" in PATCHES:
        source = re.sub(r"lamina_mbarrier_init\(&empty\[(\d+)\], (\d+)u\)",
                        lambda m: f"lamina_mbarrier_init(&empty[{m[1]}], {int(m[2]) // 32}u)", source)
        source = source.replace("lamina_mbarrier_arrive(&empty[", "if ((tid & 31) == 0) lamina_mbarrier_arrive(&empty[")
    if "setmaxnreg" in PATCHES and "if (tid >= 256) {\n" in source:
        source = source.replace("if (tid >= 256) {\n",
                                "if (tid >= 256) {\n    asm volatile(\"setmaxnreg.dec.sync.aligned.u32 40;\\n\");\n", 1)
        source = re.sub(r"\} else \{\n(\s*)int warpgroup = tid / 128;",
                        lambda m: "} else {\n" + m[1] + "asm volatile(\"setmaxnreg.inc.sync.aligned.u32 232;\\n\");\n"
                        + m[1] + "int warpgroup = tid / 128;", source, count=1)
    return source


cuda_backend.emit_cuda = _patched
_staged_copy = setting.staged_copy


def _staged_copy_unless_registers(c, choices):
    copy = _staged_copy(c, choices)
    return "" if "registers" in PATCHES and copy == setting.TMA_COPY else copy


setting.staged_copy = _staged_copy_unless_registers


def pins(block_m, block_n, stages=4, groups=2, scheduler="grid"):
    return {"products": "wgmma_tma", "block_m": block_m, "block_n": block_n, "stages": stages,
            "consumer_warpgroups": groups, "tile_scheduler": scheduler}


def linear(x, w):
    return x @ w.t()


def linear_residual(x, w, r):
    return r + x @ w.t()


def gated(x, wg, wu):
    return torch.nn.functional.silu(x @ wg.t()) * (x @ wu.t())


def weight(n, k):
    return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02


torch.manual_seed(0)
x, h = (torch.randn(512, k, device="cuda", dtype=torch.bfloat16) for k in (2048, 5632))
xq, hq = (torch.randn(512, k, device="cuda", dtype=torch.bfloat16) for k in (3584, 18944))
CASES = {
    "gate 512x2048x5632": (linear, (x, weight(5632, 2048)), [
        pins(128, 192), pins(128, 176), pins(128, 192, stages=5), pins(128, 176, stages=5), pins(128, 128)]),
    "gate_up_silu 512x2048x5632 twice": (gated, (x, weight(5632, 2048), weight(5632, 2048)), [
        pins(128, 96), pins(128, 176)]),
    "lm_head 512x2048x32000": (linear, (x, weight(32000, 2048)), [
        pins(128, 256), pins(128, 256, stages=3), pins(128, 256, scheduler="persistent"), pins(128, 192),
        pins(128, 208), pins(128, 240), pins(128, 128)]),
    "o 512x2048x2048": (linear, (x, weight(2048, 2048)), [
        pins(128, 128), pins(128, 64, groups=1), pins(64, 128, groups=1)]),
    "o_residual 512x2048x2048": (linear_residual, (x, weight(2048, 2048), x.clone()), [
        pins(128, 64, groups=1), pins(128, 64, groups=2)]),
    "down_residual 512x5632x2048": (linear_residual, (h, weight(2048, 5632), x.clone()), [
        pins(128, 64, groups=1), pins(128, 64, groups=2)]),
    "qwen q 512x3584x3584": (linear, (xq, weight(3584, 3584)), [pins(128, 112), pins(128, 128), pins(128, 64, groups=1)]),
    "qwen gate 512x3584x18944": (linear, (xq, weight(18944, 3584)), [pins(128, 192), pins(128, 256, stages=3)]),
    "qwen down_residual 512x18944x3584": (linear_residual, (hq, weight(3584, 18944), xq.clone()), []),
}
VARIANTS = {"as_emitted": (), "registers": ("registers",), "warp_arrive": ("warp_arrive",),
            "setmaxnreg": ("setmaxnreg",)}
parser = argparse.ArgumentParser()
parser.add_argument("--variants", default=",".join(VARIANTS))
parser.add_argument("--cases", default="", help="only the cases whose names hold one of these, comma-separated")
arguments = parser.parse_args()
chosen = arguments.variants.split(",")
wanted = [w for w in arguments.cases.split(",") if w]
results = {}
for case, (fn, args, settings) in CASES.items():
    if wanted and not any(w in case for w in wanted):
        continue
    reference = fn(*(a.double() for a in args))
    results[f"{case} | torch.compile"] = profiled_us(torch.compile(fn), args)
    print(case, "torch.compile", results[f"{case} | torch.compile"], flush=True)
    for pinned in [None, *settings]:
        for variant in chosen:
            PATCHES.clear()
            PATCHES.update(VARIANTS[variant])
            name = "cost model" if pinned is None else " ".join(
                f"{k}={v}" for k, v in pinned.items() if k != "products")
            key = f"{case} | {name} | {variant}"
            try:
                compiled = lamina.compile(fn, args, knobs={"contraction": pinned} if pinned else {})
                error = relative_error(compiled(*args), reference)
                results[key] = {"us": profiled_us(compiled, args), "error": error,
                                "chosen": [dict(t.knobs).get("chosen", "").split(";")[0] for t in compiled.compilation.tiles],
                                "stores": [getattr(t.settings, "staged_output_copy", "") for t in compiled.compilation.tiles]}
            except Exception as e:  # a setting the schedule refuses: its reason is the result
                results[key] = repr(e)[:300]
            print(key, results[key], flush=True)
out = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "variants.json")
with open(out, "w") as f:
    json.dump(results, f, indent=1)

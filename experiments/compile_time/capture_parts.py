"""Where the capture stage of a cold compile goes: TinyLlama (22 layers, bf16, 512 tokens; ``--arch``,
``--layers``, ``--dtype`` as ``compile_time.py``) compiled once in a new process with empty caches,
each part of ``lamina.Compiler``'s capture stage timed on its own: the plugins' loading, the code
digest (``Pipeline.cached_code``), the capture cache's key, ``torch.export``, the lowering to core
ATen (node by node, or the whole trace), folding constants and writing Torch IR, and storing the
capture. On a GPU the model and inputs are on it; ``--cpu`` keeps them on the CPU.
``python experiments/compile_time/capture_parts.py [--cpu]``."""
import argparse
import collections
import json
import os
import sys
import tempfile
import time

import torch

PARTS = collections.OrderedDict()


def timed(owner, name: str, part: str) -> None:
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            PARTS[part] = PARTS.get(part, 0.0) + time.perf_counter() - started

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    os.environ["LAMINA_CACHE_DIR"] = tempfile.mkdtemp(prefix="lamina-cache-")
    import lamina
    from lamina.core import pipeline, program_cache
    from lamina.frontends.torch import capture_cache
    from lamina.models.architectures import architecture, build, example_inputs

    capture_module = sys.modules["lamina.frontends.torch.capture"]
    timed(pipeline.Pipeline, "cached_code", "the code digest")
    timed(capture_cache, "call_key", "the capture cache's key")
    timed(capture_module, "_export", "torch.export")
    timed(capture_module, "rewritten", "to core ATen, node by node")
    timed(torch.export.ExportedProgram, "run_decompositions", "to core ATen, the whole trace")
    timed(capture_module, "fold_constants", "folding constants")
    timed(capture_module, "_build", "writing Torch IR")
    timed(program_cache.ProgramCache, "put", "storing the capture")
    device = "cpu" if args.cpu else "cuda"
    arch = architecture(args.arch)
    model = build(arch, size="real", layers=args.layers, dtype=getattr(torch, args.dtype), device=device)
    inputs = example_inputs(arch, model, length=512, device=device)
    compiler = lamina.Compiler(target="sm_90" if args.cpu else None)
    started = time.perf_counter()
    compiler.plugins  # loaded at the first compile's start: within its capture stage
    PARTS["loading the plugins"] = time.perf_counter() - started
    compiler._captured(model, (), inputs, None)
    total = time.perf_counter() - started
    PARTS["the rest"] = total - sum(PARTS.values())
    print(json.dumps({"capture_stage_s": round(total, 2), "parts_s": {k: round(v, 2) for k, v in PARTS.items()}},
                     indent=1))


if __name__ == "__main__":
    main()

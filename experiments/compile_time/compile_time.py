"""How long a model of the suite (TinyLlama-1.1B's 22 layers by default; bf16, 512 tokens) takes
to compile: cold (empty caches), and warm in a new process (the program cache and the cubins on
disk), each until the first call has run. Run on a GPU: ``python experiments/compile_time/compile_time.py
[--arch qwen2 --layers 28] [--dtype float32]`` (writes ``ARCH_LAYERS.json`` under ``$OUT``, or here,
with ``_float32`` for that dtype); ``--cpu`` times the pipeline alone on the CPU, for sm_90;
``--phase`` runs one compile in this process."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def one_compile(arch_name: str, layers: int | None, cpu: bool, dtype: torch.dtype) -> dict:
    """One compile to the first result; with ``cpu``, the pipeline alone, for sm_90, not run."""
    import lamina
    from lamina.models.architectures import architecture, build, example_inputs

    arch = architecture(arch_name)
    device = "cpu" if cpu else "cuda"
    model = build(arch, size="real", layers=layers, dtype=dtype, device=device)
    inputs = example_inputs(arch, model, length=512, device=device)
    started = time.perf_counter()
    compiled = lamina.Compiler(target="sm_90" if cpu else None).compile(model, (), inputs)
    if not cpu:
        with torch.no_grad():
            compiled(**inputs)
        torch.cuda.synchronize()
    total = time.perf_counter() - started
    timings = next(iter(compiled.specializations.values())).compilation.timings
    return {"seconds_to_first_result": round(total, 2), "stages": timings.format()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", action="store_true")
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--layers", type=int, default=None, help="the architecture's layers in the suite if left out")
    parser.add_argument("--cpu", action="store_true", help="the pipeline alone on the CPU, for sm_90, not run")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(one_compile(args.arch, args.layers, args.cpu, getattr(torch, args.dtype))))
        return
    results = {}
    with tempfile.TemporaryDirectory(prefix="lamina-cache-") as cache:
        env = {**os.environ, "LAMINA_CACHE_DIR": cache}
        env.pop("LAMINA_PROGRAM_CACHE", None)
        for phase in ("cold", "warm"):
            command = [sys.executable, __file__, "--phase", "--arch", args.arch, "--dtype", args.dtype]
            command += ["--layers", str(args.layers)] if args.layers else []
            command += ["--cpu"] if args.cpu else []
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            results[phase] = json.loads(out.strip().splitlines()[-1])
            print(phase, results[phase]["seconds_to_first_result"], "s", flush=True)
            print(results[phase]["stages"], flush=True)
    name = f"{args.arch}_{args.layers}.json" if args.layers else f"{args.arch}.json"
    name = f"cpu_{name}" if args.cpu else name
    name = name if args.dtype == "bfloat16" else name.replace(".json", f"_{args.dtype}.json")
    path = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), name)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

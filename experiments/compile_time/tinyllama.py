"""How long TinyLlama-1.1B (22 layers, bf16, 512 tokens) takes to compile: cold (empty caches),
and warm in a new process (the program cache and the cubins on disk), each until the first call
has run. Run on a GPU: ``python experiments/compile_time/tinyllama.py`` (writes ``tinyllama.json``
under ``$OUT``, or here); ``--phase`` runs one compile in this process."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


def one_compile() -> dict:
    import lamina
    from lamina.models.architectures import architecture, build, example_inputs

    arch = architecture("llama")
    model = build(arch, size="real", dtype=torch.bfloat16, device="cuda")
    inputs = example_inputs(arch, model, length=512, device="cuda")
    started = time.perf_counter()
    compiled = lamina.Compiler().compile(model, (), inputs)
    with torch.no_grad():
        compiled(**inputs)
    torch.cuda.synchronize()
    total = time.perf_counter() - started
    timings = next(iter(compiled.specializations.values())).compilation.timings
    return {"seconds_to_first_result": round(total, 2), "stages": timings.format()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phase", action="store_true")
    if parser.parse_args().phase:
        print(json.dumps(one_compile()))
        return
    results = {}
    with tempfile.TemporaryDirectory(prefix="lamina-cache-") as cache:
        env = {**os.environ, "LAMINA_CACHE_DIR": cache}
        env.pop("LAMINA_PROGRAM_CACHE", None)
        for phase in ("cold", "warm"):
            out = subprocess.run([sys.executable, __file__, "--phase"], env=env, capture_output=True, text=True,
                                 check=True).stdout
            results[phase] = json.loads(out.strip().splitlines()[-1])
            print(phase, results[phase]["seconds_to_first_result"], "s", flush=True)
            print(results[phase]["stages"], flush=True)
    path = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), "tinyllama.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

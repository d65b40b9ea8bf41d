"""What a compile through ``torch.compile`` costs before any backend's own work, against lamina's
cold and warm compile, on the CPU for sm_90 (TinyLlama's 22 layers by default; bf16, 512 tokens),
each in a new process: Dynamo's tracing alone (a backend that stops at once), Dynamo's and
AOTAutograd's (a forward compiler that stops at once), and ``backend="lamina"`` with an empty cache
directory and again with the program cache that the cold compile wrote. Nothing is run.

    python experiments/compile_time/floor_of_torch_compile.py [--arch llama] [--layers 22]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

STAGES = ("dynamo", "dynamo_and_aot", "lamina_cold", "lamina_warm")


class Compiled(BaseException):
    """Raised once the backend has its graph (not an ``Exception``, which Dynamo reports as the
    backend's failure)."""


def one(stage: str, arch_name: str, layers: int | None) -> float:
    """Seconds from the call of the compiled model to the end of ``stage``'s compile."""
    from torch._dynamo.backends.common import aot_autograd

    import lamina.integrations.torch_compile as torch_compile
    from lamina.models.architectures import architecture, build, example_inputs

    def stop(*_):
        raise Compiled

    arch = architecture(arch_name)
    model = build(arch, size="real", layers=layers, dtype=torch.bfloat16)
    inputs = example_inputs(arch, model, length=512)
    if stage == "dynamo":
        compiled = torch.compile(model, backend=stop, dynamic=False)
    elif stage == "dynamo_and_aot":
        compiled = torch.compile(model, backend=aot_autograd(fw_compiler=stop), dynamic=False)
    else:
        build_runner = torch_compile.GraphRunner.__init__

        def built(runner, *positional, **named):
            build_runner(runner, *positional, **named)
            raise Compiled

        torch_compile.GraphRunner.__init__ = built
        compiled = torch.compile(model, backend="lamina", dynamic=False, options={"target": "sm_90"})
    started = time.perf_counter()
    try:
        with torch.no_grad():
            compiled(**inputs)
    except Compiled:
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--stage", choices=STAGES, help="run one stage in this process")
    args = parser.parse_args()
    if args.stage:
        print(json.dumps(one(args.stage, args.arch, args.layers)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        for stage in STAGES:
            command = [sys.executable, __file__, "--stage", stage, "--arch", args.arch]
            if args.layers:
                command += ["--layers", str(args.layers)]
            env = {**os.environ, "LAMINA_CACHE_DIR": cache, "LAMINA_PROGRAM_CACHE": "1"}
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
            results[stage] = round(json.loads(out.strip().splitlines()[-1]), 2)
            print(f"{stage}: {results[stage]} s", flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()

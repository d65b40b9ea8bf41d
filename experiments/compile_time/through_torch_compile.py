"""How long lamina's pipeline takes on a model compiled as users compile it, ``torch.compile(model,
backend="lamina")``, on the CPU for sm_90 (TinyLlama's 22 layers by default; bf16, 512 tokens): the
time from the call to the end of lamina's compile of the captured graph (Dynamo's and AOTAutograd's
tracing included), lamina's part, and its stages. The compiled program is not run.

    LAMINA_PROGRAM_CACHE=0 python experiments/compile_time/through_torch_compile.py [--arch llama] [--layers 22]
"""
import argparse
import time

import torch

import lamina.integrations.torch_compile as torch_compile
from lamina.models.architectures import architecture, build, example_inputs


class Compiled(BaseException):
    """Raised once lamina has compiled the graph, so that the CPU does not run a program for sm_90 (not an
    ``Exception``, which Dynamo would report as the backend's failure)."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--layers", type=int, default=None)
    args = parser.parse_args()
    arch = architecture(args.arch)
    model = build(arch, size="real", layers=args.layers, dtype=torch.bfloat16)
    inputs = example_inputs(arch, model, length=512)
    compile_graph = torch_compile.GraphRunner.__init__

    def timed(runner, *positional, **named):
        started = time.perf_counter()
        compile_graph(runner, *positional, **named)
        print(f"lamina's part: {time.perf_counter() - started:.2f} s")
        for _, specialization in runner._specializations.values():
            print(specialization.compilation.timings.format())
        raise Compiled

    torch_compile.GraphRunner.__init__ = timed
    compiled = torch.compile(model, backend="lamina", dynamic=False, options={"target": "sm_90"})
    started = time.perf_counter()
    try:
        with torch.no_grad():
            compiled(**inputs)
    except Compiled:
        pass
    print(f"from the call to the compiled graph: {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()

"""A model of the matrix through ``torch.compile(model, backend="lamina")`` on the GPU: each launch's
own time in one forward pass, in launch order (the median of five passes), then every kernel's
Tile IR, so that a slow launch can be read beside the schedule that made it.

    python experiments/small_models_at_batch_8/profile_with_tiles.py bert:8:128:2

The argument is ARCH:BATCH:LENGTH:LAYERS (real sizes, bfloat16); writes
``profile_ARCH_bBATCH_sLENGTH.txt`` under ``$OUT`` (or here). A launch's own time is counted as
``benchmarks/profile_model.py`` counts it (from its start or the previous kernel's end, whichever is
later)."""
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from profile_model import kernel_spans, own_times  # noqa: E402

import lamina.integrations.torch_compile as torch_compile  # noqa: E402
from lamina.core.ir import tile_ir  # noqa: E402
from lamina.models.architectures import architecture, build, example_inputs  # noqa: E402

PASSES = 5


def main() -> None:
    name, batch, length, layers = sys.argv[1].split(":")
    batch, length, layers = int(batch), int(length), int(layers)
    runners = []
    compile_graph = torch_compile.GraphRunner.__init__

    def kept(runner, *positional, **named):
        compile_graph(runner, *positional, **named)
        runners.append(runner)

    torch_compile.GraphRunner.__init__ = kept
    arch = architecture(name)
    model = build(arch, size="real", length=length, layers=layers, dtype=torch.bfloat16, device="cuda")
    inputs = example_inputs(arch, model, batch=batch, length=length, device="cuda")
    own = own_times(kernel_spans(model, inputs, "lamina", PASSES))
    per_pass = len(own) // PASSES
    path = os.path.join(os.environ.get("OUT", os.path.dirname(__file__)), f"profile_{name}_b{batch}_s{length}.txt")
    with open(path, "w") as out:
        for i in range(per_pass):
            us = statistics.median(own[p * per_pass + i][1] for p in range(PASSES))
            print(f"{i:3d} {us:8.2f} us  {own[i][0][:90]}", file=out)
        print(f"total per pass {sum(t for _, t in own) / PASSES:.1f} us", file=out)
        for runner in runners:
            for _, specialization in runner._specializations.values():
                if specialization is not None:
                    for tile in specialization.compilation.tiles:
                        print("\n" + tile_ir.format_tile_kernel(tile), file=out)


if __name__ == "__main__":
    main()

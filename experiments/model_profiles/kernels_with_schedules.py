"""Which lamina kernel is which: a model of the matrix compiled through ``torch.compile`` on the GPU, each
kernel's time (what it adds to the GPU's busy time, as ``benchmarks/profile_model.py`` counts it) beside
the head of its Tile IR (schedule, grid, products), so that a profile's names read as what they do.

    python experiments/model_profiles/kernels_with_schedules.py llama 512 1 [lamina|inductor]

Arguments: architecture, tokens, layers, backend. Program cache off (``LAMINA_PROGRAM_CACHE=0``) so that
the pipeline runs and its Tile IR can be read; kernels that compile to the same code share a name in
the profile, which may differ from their Tile IR name by its number.
"""
import sys
from pathlib import Path

import torch

import lamina.api
from lamina.core.ir import tile_ir
from lamina.models.architectures import architecture, build, example_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from profile_model import profile  # noqa: E402

PASSES = 5
SHOWN = ("tile", "grid", "parallel", "reduce", "products", "two sums")


def main() -> None:
    arch_name, length, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    backend = sys.argv[4] if len(sys.argv) > 4 else "lamina"
    compiled_programs = []
    compile_captured = lamina.api.Compiler.compile_captured

    def recorded(self, *args, **kwargs):
        compiled_programs.append(compile_captured(self, *args, **kwargs))
        return compiled_programs[-1]

    lamina.api.Compiler.compile_captured = recorded
    arch = architecture(arch_name)
    model = build(arch, size="real", layers=layers, dtype=torch.bfloat16, device="cuda")
    inputs = example_inputs(arch, model, length=length, device="cuda")
    record = profile(model, inputs, backend, PASSES)
    print(f"{arch_name}, {length} tokens, {layers} layer(s), {backend}: {record['total_us_per_pass']:.1f} us per pass")
    for row in record["kernels"]:
        print(f"{row['us_per_pass']:9.1f} us x{row['launches_per_pass']:g}  {row['kernel']}")
    if compiled_programs:
        print("\nthe Tile IR of each kernel:")
    for program in compiled_programs:
        for tile in program.compilation.tiles:
            lines = tile_ir.format_tile_kernel(tile).splitlines()
            print("\n".join(line for line in lines if line.strip().startswith(SHOWN)))


if __name__ == "__main__":
    main()

"""``lamina models``: the architectures lamina compiles whole, as CI checks them.

``--markdown`` prints the table the README shows, generated from the same list the
model-matrix tests run.
"""

from __future__ import annotations

from lamina.models.architectures import ARCHITECTURES, ENTRY_POINTS, markdown_table


def models_command(args) -> int:
    if args.markdown:
        print(markdown_table())
        return 0
    width = max(len(name) for name in ARCHITECTURES)
    for arch in ARCHITECTURES.values():
        lengths = ", ".join(map(str, arch.lengths))
        print(f"{arch.name.ljust(width)}  {arch.checkpoint}: {arch.layers('real')} layers, {arch.inputs}, "
              f"benched at length {lengths}; {arch.model_class}")
    print(f"{len(ARCHITECTURES)} architectures, each checked in CI through {' and '.join(ENTRY_POINTS)} "
          "(scaled down, on the simulator, against eager PyTorch in float64)")
    return 0

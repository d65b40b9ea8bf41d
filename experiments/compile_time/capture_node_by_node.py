"""Each architecture of the model matrix (scaled down, 2 layers, bf16, 32 tokens) captured twice: lowered to
core ATen node by node (``lamina/frontends/torch/core_aten.py``) and by ``run_decompositions``.
Prints whether the node-by-node lowering took the program, each way's capture time, and where
the two graphs' ops differ (they should not). Run on the CPU:
``python experiments/compile_time/capture_node_by_node.py [ARCH ...]``."""
import collections
import sys
import time

import torch

from lamina.frontends.torch import capture
from lamina.models.architectures import ARCHITECTURES, PADDED_TEXT, TEXT, architecture, build, example_inputs

capture_module = sys.modules["lamina.frontends.torch.capture"]
node_by_node = capture_module.rewritten


def ops(graph) -> collections.Counter:
    return collections.Counter(node.target for node in graph.nodes)


def main() -> None:
    for name in sys.argv[1:] or sorted(ARCHITECTURES):
        arch = architecture(name)
        model = build(arch, size="small", layers=2, dtype=torch.bfloat16)
        inputs = example_inputs(arch, model, length=32 if arch.inputs in (TEXT, PADDED_TEXT) else None)
        taken, graphs, seconds = [], {}, {}
        for way, lowering in (("node by node", lambda *a: (lambda r: taken.append(r is not None) or r)(
                node_by_node(*a))), ("whole trace", lambda *a: None)):
            capture_module.rewritten = lowering
            started = time.perf_counter()
            try:
                graphs[way] = capture(model, (), example_kwargs=inputs).graph
            except Exception as error:  # noqa: BLE001 - a program that does not capture is a row
                graphs[way] = f"{type(error).__name__}: {str(error)[:100]}"
            seconds[way] = time.perf_counter() - started
        capture_module.rewritten = node_by_node
        if any(isinstance(g, str) for g in graphs.values()):
            print(f"{name:16} not captured: {graphs}")
            continue
        a, b = ops(graphs["node by node"]), ops(graphs["whole trace"])
        differ = {k: (a[k], b[k]) for k in set(a) | set(b) if a[k] != b[k]}
        print(f"{name:16} node by node: {taken[-1]!s:5}  {seconds['node by node']:.2f} s against "
              f"{seconds['whole trace']:.2f} s; ops that differ: {differ or 'none'}")


if __name__ == "__main__":
    main()

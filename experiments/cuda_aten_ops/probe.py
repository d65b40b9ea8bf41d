"""Which ATen ops each architecture of the model matrix hands a torch.compile backend, on CUDA and on the CPU.

    python experiments/cuda_aten_ops/probe.py --device cuda --out ops_cuda.json

Each scaled-down model is compiled with a backend that records the forward graph
AOTAutograd produces (with lamina's decompositions) and runs it as PyTorch would, for
batch 2 and 13 tokens (or the model's own input), in float32 and bfloat16. The record
lists every op, each one lamina registers no decomposition for, and the arguments of
every attention op.
"""

import argparse
import json
import traceback

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from lamina.core.config import load_config
from lamina.core.plugins import get_plugin_manager
from lamina.frontends.torch.capture import DEFAULT_KEEP
from lamina.integrations.torch_compile import decompositions
from lamina.models.architectures import ARCHITECTURES, build, example_inputs


def describe(value):
    if isinstance(value, torch.fx.Node):
        v = value.meta.get("val")
        return f"{value.name}:{tuple(v.shape)}:{v.dtype}" if isinstance(v, torch.Tensor) else value.name
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return repr(value)


def probe(arch, device, dtype):
    model = build(arch, size="small", length=16 if arch.inputs == "image" else None, dtype=dtype, device=device)
    length = 16 if arch.inputs == "image" else (arch.small.get("max_source_positions", 13) if arch.inputs == "audio" else 13)
    inputs = example_inputs(arch, model, batch=2, length=length, device=device)
    graphs = []

    def forward_compiler(gm, example):
        ops, attention, constants = set(), [], []
        for node in gm.graph.nodes:
            if node.op == "call_function":
                name = str(node.target)
                ops.add(name)
                if "attention" in name:
                    attention.append({"op": name, "args": describe(node.args), "kwargs": describe(node.kwargs)})
            elif node.op == "get_attr":
                constants.append({"name": node.name, "value": describe(getattr(gm, node.target))})
        graphs.append({"ops": sorted(ops), "attention": attention, "get_attr": constants})
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=forward_compiler, decompositions=decompositions(DEFAULT_KEEP))
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(**inputs)
    return graphs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    known = set(get_plugin_manager(load_config()).registry.names("op"))
    record = {"torch": torch.__version__, "transformers": __import__("transformers").__version__, "models": {}}
    for arch in ARCHITECTURES.values():
        for dtype in (torch.float32, torch.bfloat16):
            key = f"{arch.name}.{str(dtype).removeprefix('torch.')}"
            try:
                graphs = probe(arch, args.device, dtype)
                ops = sorted({op for g in graphs for op in g["ops"]})
                record["models"][key] = {"graphs": len(graphs), "unsupported": [o for o in ops if o not in known],
                                         "ops": ops, "details": graphs}
            except Exception as error:
                record["models"][key] = {"failure": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
            entry = record["models"][key]
            print(key, entry.get("unsupported", entry.get("failure", ""))[:20] if "failure" not in entry else entry["failure"][:300], flush=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()

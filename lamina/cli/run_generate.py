"""``lamina run --model M --generate N [--cache dynamic]``: greedy generation, as users run it.

The model's ``forward`` is compiled with ``torch.compile(model.forward, backend="lamina")``
(with ``mode="reduce-overhead"`` on a GPU, which replays each compiled step from a CUDA graph)
and ``model.generate`` makes N tokens after a random prompt, with ``transformers``' static cache
or (``--cache dynamic``) its default one, which grows at each step. Printed: the first call (which
compiles), the time to the first token and the tokens per second of a second call, and the
number of programs compiled (lamina's, and the graphs torch.compile made); the same for eager
PyTorch and, on a GPU, for torch.compile as ``transformers`` applies it to a static cache's
decoding step (``mode="reduce-overhead"``; the prompt's step runs eagerly), or with the dynamic
cache as ``torch.compile(model.forward)``. Each compiled
contender's tokens are compared with eager's; where they part, the first difference is
reported with the logits there.
"""

from __future__ import annotations

from typing import Iterator

import torch

from lamina.api import Compiler
from lamina.cli.run_command import choose_device
from lamina.cli.run_model import DTYPES, check_simulator_size, model_layers
from lamina.core.errors import LaminaError
from lamina.core.hookspecs import hookimpl
from lamina.models import build_model, model_config
from lamina.models.generation import Generated, first_divergence, generate_timed

DEFAULT_PROMPT = 128


class CompileCounter:
    """A plugin that counts lamina's compiles: each compile shows its Torch IR to observers once."""

    def __init__(self):
        self.count = 0

    @hookimpl
    def lamina_observe_ir(self, level, ir, compilation):
        if level == "torch":
            self.count += 1


def run_generate_command(args) -> int:
    if args.code is not None or args.input:
        raise LaminaError("--model runs a shipped model: leave out -c and --input")
    if args.seq is not None:
        raise LaminaError("--generate takes the prompt's length as --prompt, not --seq")
    device = choose_device(args.device)
    config = model_config(args.model)
    layers = model_layers(config, args.layers)
    dtype_name = args.dtype or "float32"
    prompt = DEFAULT_PROMPT if args.prompt is None else args.prompt
    batch = 1 if args.batch is None else args.batch
    new_tokens = args.generate
    if new_tokens < 1 or batch < 1:
        raise LaminaError(f"--generate and --batch take 1 or more, not {min(new_tokens, batch)}")
    fed = prompt + new_tokens - 1  # the last new token is never fed back
    if prompt < 1 or fed > config.max_position_embeddings:
        raise LaminaError(f"{config.name} takes 1 to {config.max_position_embeddings} positions; --prompt {prompt} "
                          f"and --generate {new_tokens} feed it {fed}")
    if device == "cpu":
        flops = 2 * (config.forward_flops(prompt, layers) + new_tokens * config.forward_flops(1, layers))
        check_simulator_size(config, flops, f"generating {new_tokens} tokens after {prompt} with {layers} layer(s) of "
                             f"{config.name}, twice (the first call compiles),",
                             "--layers 1, a small --prompt and a small --generate (such as 8 and 4)")
    model = build_model(config, num_layers=layers, dtype=DTYPES[dtype_name], device=device, seed=args.seed).model
    generator = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, config.vocab_size, (batch, prompt), generator=generator).to(device)
    print(f"model     {config.describe()}")
    print(f"          {layers} of {config.num_hidden_layers} layers, random weights (seed {args.seed}), {dtype_name}")
    cache = args.cache or "static"
    print(f"generate  {new_tokens} tokens after a random prompt of {prompt} (batch {batch}): greedy, {cache} cache")

    where = torch.cuda.get_device_name() if device == "cuda" else "the Kernel IR simulator (CPU); eager on the CPU"
    print(f"ran on    {where}")
    print(f"  {'':14s} {'first call':>11s} {'first token':>12s} {'tokens/s':>10s} {'compiled':>9s}")
    counter = CompileCounter()
    manager = Compiler(target=args.target).plugins.pm
    manager.register(counter)
    try:
        eager = None
        for run in _contenders(model, ids, new_tokens, device, args, counter, cache):
            compiled = "-" if run.compiled is None else str(run.compiled)
            print(f"  {run.name:14s} {run.first_call_s:9.2f} s {run.first_token_s * 1e3:9.2f} ms "
                  f"{run.tokens_per_second:10.1f} {compiled:>9s}", flush=True)
            eager = eager or run
            if run is not eager:
                divergence = first_divergence(run, eager)
                sameness = (f"{run.tokens.numel()} tokens are eager's" if divergence is None
                            else divergence.describe(run.name, "eager"))
                print(f"  {'':14s} {sameness}", flush=True)
    finally:
        manager.unregister(counter)
    return 0


def _unique_graphs() -> int:
    """The graphs Dynamo has compiled in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def _contenders(model, ids, new_tokens, device, args, counter, cache) -> Iterator[Generated]:
    """Eager PyTorch, lamina and (on a GPU) torch.compile, in that order, each compiled afresh. With
    the dynamic cache, which ``transformers`` does not compile itself, torch.compile is applied to
    ``model.forward`` as a user would (default mode: Inductor makes the growing length symbolic)."""
    options = {k: v for k, v in (("target", args.target), ("schedule", args.schedule)) if v is not None}
    gpu = device == "cuda"
    if options:  # torch.compile takes a mode or options, not both
        compiled = {"backend": "lamina", "options": {**options, "cuda_graphs": gpu}}
    else:
        compiled = {"backend": "lamina", "mode": "reduce-overhead" if gpu else None}
    yield generate_timed(model, ids, new_tokens, "eager", cache=cache)
    torch._dynamo.reset()
    yield generate_timed(model, ids, new_tokens, "lamina", torch.compile(model.forward, **compiled),
                         count=lambda: counter.count, cache=cache)
    torch._dynamo.reset()
    if gpu and cache == "static":  # as transformers users get it: the decoding step with mode="reduce-overhead"
        yield generate_timed(model, ids, new_tokens, "torch.compile", count=_unique_graphs, transformers_compiles=True)
        torch._dynamo.reset()
    elif gpu:
        yield generate_timed(model, ids, new_tokens, "torch.compile", torch.compile(model.forward),
                             count=_unique_graphs, cache=cache)
        torch._dynamo.reset()

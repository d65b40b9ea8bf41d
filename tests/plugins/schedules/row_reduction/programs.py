"""The row-wise programs the row-reduction schedule is for, with inputs of a given row count and length."""

from __future__ import annotations

import functools

import attrs
import torch

import lamina

EPS = 1e-6


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def add_rms_norm(x, r, w):
    """The residual stream is stored too: the next layer reads it again."""
    h = x + r
    return h, rms_norm(h, w)


def rms_norm_rotated(x, w, cos, sin):
    """Qwen3's query: a norm over each head's row, then RoPE, whose rotated half gathers the row
    at other columns."""
    n = rms_norm(x, w)
    half = n.shape[-1] // 2
    return n * cos + torch.cat([-n[..., half:], n[..., :half]], -1) * sin


def softmax(x):
    return torch.softmax(x, -1)


def softmax_with_position_bias(scores, table):
    """T5's attention, as PyTorch's attention math writes it: a bias read from a small table at a
    bucket of each key's distance from the query (a gather inside the reductions), and the rows
    masked whole set to zero, found by an ``any`` over the row (none is masked here)."""
    n = scores.shape[-1]
    distance = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    biased = scores + table[distance.abs().clamp(max=table.shape[0] - 1)]
    keep = (biased != float("-inf")).any(-1, keepdim=True)
    return torch.where(keep, torch.softmax(biased, -1), 0.0)


def row_sum(x):
    return x.sum(-1)


def row_mean(x):
    return x.mean(-1, keepdim=True)


def causal_softmax(scores):
    """Softmax of attention scores (n, n) with the future masked out: one row per query."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1)


def layer_norm_over_channels(x, w, b):
    """A norm over the channels of a (channels, positions) tensor, a convolution's output as it is
    stored (Whisper's): each row's elements lie a row of positions apart."""
    return torch.nn.functional.layer_norm(x.transpose(0, 1), (x.shape[0],), w, b)


@attrs.frozen
class RowProgram:
    id: str
    fn: object
    shapes: object
    """(rows, length) -> the shapes of the inputs."""
    dtype: torch.dtype = torch.float32

    def inputs(self, rows: int, length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(s, generator=generator).to(self.dtype) for s in self.shapes(rows, length))


PROGRAMS = [
    RowProgram("rms_norm", rms_norm, lambda rows, n: ((rows, n), (n,))),
    RowProgram("add_rms_norm", add_rms_norm, lambda rows, n: ((rows, n), (rows, n), (n,))),
    RowProgram("softmax", softmax, lambda rows, n: ((rows, n),)),
    RowProgram("sum", row_sum, lambda rows, n: ((rows, n),)),
    RowProgram("mean_keepdim", row_mean, lambda rows, n: ((rows, n),)),
    RowProgram("causal_softmax", causal_softmax, lambda rows, n: ((n, n),)),
    RowProgram("rms_norm_bf16", rms_norm, lambda rows, n: ((rows, n), (n,)), torch.bfloat16),
    RowProgram("softmax_bf16", softmax, lambda rows, n: ((rows, n),), torch.bfloat16),
    RowProgram("sum_bf16", row_sum, lambda rows, n: ((rows, n),), torch.bfloat16),
    RowProgram("softmax_with_position_bias", softmax_with_position_bias, lambda rows, n: ((n, n), (9,))),
    RowProgram("layer_norm_over_channels", layer_norm_over_channels, lambda rows, n: ((n, rows), (n,), (n,))),
    RowProgram("rms_norm_rotated_bf16", rms_norm_rotated, lambda rows, n: ((rows, n), (n,), (rows, n), (rows, n)),
               torch.bfloat16),
]
BY_ID = {p.id: p for p in PROGRAMS}


@functools.lru_cache(maxsize=None)
def captured(program: RowProgram, rows: int, length: int):
    """The program exported once for inputs of ``rows`` x ``length`` (export is the slow step)."""
    return lamina.Compiler().specialize(program.fn, program.inputs(rows, length)).captured


def run(program: RowProgram, rows: int, length: int, **settings):
    """The program compiled with ``settings`` and run on the Kernel IR simulator: its
    compilation, inputs and outputs."""
    inputs = program.inputs(rows, length)
    specialization = lamina.Compiler(**settings).compile_captured(captured(program, rows, length), inputs)
    return specialization.compilation, inputs, tuple(specialization(inputs, torch.device("cpu")))


def compile_program(program: RowProgram, rows: int, length: int):
    """The program's compilation with the default settings: every level, for inspection."""
    inputs = program.inputs(rows, length)
    return lamina.Compiler().compile_captured(captured(program, rows, length), inputs).compilation


def loop_kernel(program: RowProgram, rows: int, length: int):
    """The one Loop IR kernel that fusion makes of the program."""
    (kernel,) = compile_program(program, rows, length).loop.kernels
    return kernel

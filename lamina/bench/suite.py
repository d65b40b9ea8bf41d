"""The benchmark suite as data: the kernels of TinyLlama-1.1B and Qwen2.5-7B, and the running example.

A case is a PyTorch expression of named inputs (the same language as ``lamina run -c``),
the shapes and dtypes of those inputs, and its FLOPs. The bytes a case must move are
computed from the shapes: every input read once, the output written once.

Users add cases with a TOML file passed as ``lamina bench --suite-file FILE.toml``::

    [[case]]
    name = "my.gelu.s2048"
    expression = "F.gelu(x) * y"
    inputs = ["x=2048,4096:float32", "y=2048,4096:float32"]
    flops = 67108864        # optional; default: one FLOP per output element
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path

import attrs
import torch

from lamina.core.config import load_config
from lamina.core.errors import LaminaError
from lamina.core.plugins import get_plugin_manager
from lamina.core.target import Target
from lamina.program_spec import RUNNING_EXAMPLE, RUNNING_EXAMPLE_INPUTS, InputSpec, ProgramSpec, parse_input

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

MEASURED_TARGET = "sm_90"
"""The target whose ceilings the suite's figures are read against: the H200's."""

SEQUENCE_LENGTHS = (1, 128, 2048)
ATTENTION_LENGTHS = (128, 512, 2048, 8192)
"""Prompt lengths of the whole-attention cases (``F.scaled_dot_product_attention``)."""
DECODE_CACHE_LENGTHS = (512, 4096, 32768)
"""Cached positions that one new query attends to in the decoding cases."""
ATTENTION_DTYPES = (torch.bfloat16, torch.float32)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
EPS = 1e-6


@attrs.frozen
class Case:
    name: str
    expression: str
    inputs: tuple[InputSpec, ...]
    flops: int
    bytes_moved: int

    @property
    def dtype(self) -> torch.dtype:
        return self.inputs[0].dtype

    @property
    def memory_bound(self) -> bool:
        """Below the roofline's ridge point: fewer FLOPs per byte than the device can do per byte."""
        return self.flops / self.bytes_moved < peak_flops_per_second(self.dtype) / copy_bytes_per_second()

    def program(self) -> ProgramSpec:
        return ProgramSpec(self.expression, self.inputs, origin=f"<lamina bench {self.name}>")


@functools.cache
def measured_target() -> Target:
    """The registered target named ``MEASURED_TARGET``: its bandwidth, FLOP rates and L2 are the ceilings."""
    entry = get_plugin_manager(load_config()).registry.get("target", MEASURED_TARGET)
    if entry is None:
        raise LaminaError(f"lamina bench reads its ceilings from the {MEASURED_TARGET} target, and no loaded "
                          "plugin registers it: take lamina.builtin.backends.cuda off the disabled plugins")
    return entry.provider


def copy_bytes_per_second() -> float:
    return measured_target().memory_bytes_per_us * 1e6


def peak_flops_per_second(dtype: torch.dtype) -> float:
    """bfloat16 and float16 on the tensor cores (the same rate); every other dtype on the CUDA cores, as float32."""
    target = measured_target()
    half = dtype in (torch.bfloat16, torch.float16)
    return (target.bf16_tensor_flops_per_us if half else target.fp32_flops_per_us) * 1e6


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return math.prod(shape) * dtype.itemsize


def make_case(name: str, expression: str, inputs: tuple[InputSpec, ...], flops: int | None = None) -> Case:
    """A case whose bytes come from its shapes; the output's shape from running it on meta tensors."""
    spec = ProgramSpec(expression, inputs, origin=f"<lamina bench {name}>")
    try:
        out = spec.function()(*(torch.empty(i.shape, dtype=i.dtype, device="meta") for i in inputs))
    except Exception as e:
        raise LaminaError(f"bench case {name!r}: {expression!r} fails on its inputs: {type(e).__name__}: {e}") from None
    moved = sum(_nbytes(i.shape, i.dtype) for i in inputs) + _nbytes(tuple(out.shape), out.dtype)
    return Case(name, expression, inputs, out.numel() if flops is None else flops, moved)


@attrs.frozen
class Model:
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool


TINYLLAMA = Model("tinyllama", hidden=2048, intermediate=5632, heads=32, kv_heads=4, head_dim=64, qkv_bias=False)
QWEN = Model("qwen", hidden=3584, intermediate=18944, heads=28, kv_heads=4, head_dim=128, qkv_bias=True)
MODELS = (TINYLLAMA, QWEN)



def _rmsnorm(x: str) -> str:
    return f"{x} * torch.rsqrt({x}.pow(2).mean(-1, keepdim=True) + {EPS}) * w"


def _inputs(dtype: torch.dtype, **shapes: tuple[int, ...]) -> tuple[InputSpec, ...]:
    return tuple(InputSpec(name, shape, dtype) for name, shape in shapes.items())


def model_cases(m: Model, s: int, dtype: torch.dtype) -> list[Case]:
    """The kernels of one decoder layer of ``m`` at sequence length ``s``.

    FLOP conventions: RMSNorm 4 per element (square, sum, two products), +1 for the
    residual add; silu(gate) * up 5 per element; RoPE 3 per element; attention scores
    2 d per score for q k^T plus 4 per score (scale, max, exp, normalise); linear 2 M N K,
    plus M N for a bias. ``gated_mlp`` is the MLP's gate and up projections of one input with
    their ``silu(gate) * up``, as the layer computes them (the fused epilogue the issue of
    Hopper GEMMs asks lamina to win with: on Hopper one kernel sums both products).
    """
    h, i, d, heads = m.hidden, m.intermediate, m.head_dim, m.heads
    qkv = h + 2 * m.kv_heads * d
    scale = 1.0 / math.sqrt(d)
    scores = f"q @ k.transpose(-1, -2) * {scale!r}"
    causal_mask = "torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)"
    tag = f".s{s}.{SHORT[dtype]}"
    found = [
        make_case(f"{m.name}.rmsnorm" + tag, _rmsnorm("x"),
                  _inputs(dtype, x=(s, h), w=(h,)), 4 * s * h),
        make_case(f"{m.name}.add_rmsnorm" + tag, f"(lambda h: {_rmsnorm('h')})(x + r)",
                  _inputs(dtype, x=(s, h), r=(s, h), w=(h,)), 5 * s * h),
        make_case(f"{m.name}.silu_mul" + tag, "F.silu(gate) * up",
                  _inputs(dtype, gate=(s, i), up=(s, i)), 5 * s * i),
        make_case(f"{m.name}.rope_q" + tag,
                  f"q * cos + torch.cat((-q[..., {d // 2}:], q[..., :{d // 2}]), -1) * sin",
                  _inputs(dtype, q=(1, heads, s, d), cos=(s, d), sin=(s, d)), 3 * heads * s * d),
        make_case(f"{m.name}.scores" + tag, f"torch.softmax({scores}, -1)",
                  _inputs(dtype, q=(1, heads, s, d), k=(1, heads, s, d)), heads * s * s * (2 * d + 4)),
    ]
    if s > 1:
        found.append(make_case(f"{m.name}.scores_causal" + tag,
                               f"torch.softmax(({scores}).masked_fill({causal_mask}, float('-inf')), -1)",
                               _inputs(dtype, q=(1, heads, s, d), k=(1, heads, s, d)), heads * s * s * (2 * d + 4)))
    found.append(make_case(f"{m.name}.gated_mlp" + tag, "F.silu(F.linear(x, wg)) * F.linear(x, wu)",
                           _inputs(dtype, x=(s, h), wg=(i, h), wu=(i, h)), 4 * s * h * i + 5 * s * i))
    projections = {"qkv": (h, qkv, m.qkv_bias), "o": (h, h, False), "gate_up": (h, 2 * i, False), "down": (i, h, False)}
    for name, (k_in, n_out, bias) in projections.items():
        shapes = {"x": (s, k_in), "w": (n_out, k_in)} | ({"b": (n_out,)} if bias else {})
        flops = 2 * s * n_out * k_in + (s * n_out if bias else 0)
        expression = "F.linear(x, w, b)" if bias else "F.linear(x, w)"
        found.append(make_case(f"{m.name}.linear_{name}" + tag, expression, _inputs(dtype, **shapes), flops))
    return found


def attention_cases(m: Model, dtype: torch.dtype) -> list[Case]:
    """Whole attention of ``m``'s heads (its grouped key-value heads read as they are): prefill at
    each of ``ATTENTION_LENGTHS``, causal and not, and one query against a cache of each of
    ``DECODE_CACHE_LENGTHS`` positions.

    FLOPs: 4 d per score (two products), half of them where causal (the scores above the diagonal
    are not needed), as FlashAttention's papers count them.
    """
    d, heads, kv = m.head_dim, m.heads, m.kv_heads
    short = SHORT[dtype]
    found = []
    for s in ATTENTION_LENGTHS:
        shapes = _inputs(dtype, q=(1, heads, s, d), k=(1, kv, s, d), v=(1, kv, s, d))
        flops = 4 * heads * s * s * d
        found.append(make_case(f"{m.name}.attention.s{s}.{short}",
                               "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)", shapes, flops))
        found.append(make_case(f"{m.name}.attention_causal.s{s}.{short}",
                               "F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)", shapes,
                               flops // 2))
    for cached in DECODE_CACHE_LENGTHS:
        shapes = _inputs(dtype, q=(1, heads, 1, d), k=(1, kv, cached, d), v=(1, kv, cached, d))
        found.append(make_case(f"{m.name}.attention_decode.c{cached}.{short}",
                               "F.scaled_dot_product_attention(q, k, v, enable_gqa=True)", shapes,
                               4 * heads * cached * d))
    return found


def running_example_case(dtype: torch.dtype) -> Case:
    """relu(matmul(x + bias, w)) with x 16x64, bias 64, w 64x16: the example DESIGN.md follows."""
    inputs = tuple(attrs.evolve(parse_input(text), dtype=dtype) for text in RUNNING_EXAMPLE_INPUTS)
    return make_case(f"running_example.{SHORT[dtype]}", RUNNING_EXAMPLE, inputs, 16 * 64 + 2 * 16 * 64 * 16 + 16 * 16)


def builtin_suite() -> list[Case]:
    cases = [running_example_case(dtype) for dtype in DTYPES.values()]
    for dtype in DTYPES.values():
        for m in MODELS:
            for s in SEQUENCE_LENGTHS:
                cases += model_cases(m, s, dtype)
    for dtype in ATTENTION_DTYPES:
        for m in MODELS:
            cases += attention_cases(m, dtype)
    return cases


def load_suite_file(path: Path) -> list[Case]:
    """Cases from a TOML file: a ``[[case]]`` table per case (see this module's docstring)."""
    try:
        document = tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise LaminaError(f"--suite-file {path}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise LaminaError(f"--suite-file {path}: not valid TOML: {e}") from None
    entries = document.get("case")
    if not isinstance(entries, list) or not entries:
        raise LaminaError(f"--suite-file {path}: add at least one [[case]] table with name, expression and inputs")
    cases = []
    for k, entry in enumerate(entries, 1):
        missing = [key for key in ("name", "expression", "inputs") if key not in entry]
        if missing:
            raise LaminaError(f"--suite-file {path}: case {k} lacks {', '.join(missing)}")
        unknown = sorted(set(entry) - {"name", "expression", "inputs", "flops"})
        if unknown:
            raise LaminaError(f"--suite-file {path}: case {entry['name']!r} has unknown key(s) {', '.join(unknown)}; "
                              "the keys are name, expression, inputs and flops")
        inputs = tuple(parse_input(text) for text in entry["inputs"])
        cases.append(make_case(entry["name"], entry["expression"], inputs, entry.get("flops")))
    return cases


def check_unique(cases: list[Case]) -> list[Case]:
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise LaminaError(f"two bench cases are named {case.name!r}: give each case its own name")
        seen.add(case.name)
    return cases

"""A program written as one PyTorch expression of named inputs, with each input's shape and dtype.

It is what ``lamina compile`` and ``lamina run`` work on (``-c EXPR`` with ``--input
NAME=SHAPE[:DTYPE]``, or the built-in example), and how a case of ``lamina bench`` is
written; it lives outside both so that neither imports the other for it.
"""

from __future__ import annotations

import linecache

import attrs
import torch

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes

RUNNING_EXAMPLE = "torch.relu(torch.matmul(x + bias, w))"
RUNNING_EXAMPLE_INPUTS = ("x=16,64", "bias=64", "w=64,16")

INPUT_HELP = (
    "an input of the expression: NAME=SHAPE[:DTYPE], SHAPE as comma-separated sizes "
    "(empty for a scalar tensor), DTYPE a PyTorch name such as float32 (default), bfloat16, "
    "float16, int64. Repeat once per input, in the order of the function's parameters."
)


@attrs.frozen
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    def describe(self) -> str:
        return f"{self.name}: {dtypes.from_name(str(self.dtype).removeprefix('torch.')).short}[{', '.join(map(str, self.shape))}]"

    def random(self, generator: torch.Generator) -> torch.Tensor:
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, generator=generator, dtype=torch.float32).to(self.dtype)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, generator=generator).bool()
        return torch.randint(-8 if self.dtype.is_signed else 0, 8, self.shape, generator=generator, dtype=self.dtype)


def parse_input(text: str) -> InputSpec:
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise LaminaError(f"--input {text!r}: write it as NAME=SHAPE[:DTYPE], for example x=16,64 or x=16,64:bfloat16")
    shape_text, _, dtype_text = rest.partition(":")
    try:
        shape = tuple(int(s) for s in shape_text.split(",") if s.strip())
    except ValueError:
        raise LaminaError(f"--input {text!r}: the shape must be comma-separated integers, like 16,64") from None
    if any(s <= 0 for s in shape):
        raise LaminaError(f"--input {text!r}: sizes must be positive")
    dtype = getattr(torch, dtypes.from_name(dtype_text.strip() or "float32").name)
    return InputSpec(name, shape, dtype)


@attrs.frozen
class ProgramSpec:
    expression: str
    inputs: tuple[InputSpec, ...]
    #: The file name that Torch IR and error messages give for the expression's line.
    origin: str = "<lamina -c>"

    def function(self):
        """A Python function of the inputs that evaluates the expression.

        Its source is registered with linecache under ``origin``, so that Torch IR and
        error messages can point at it.
        """
        params = ", ".join(i.name for i in self.inputs)
        filename = self.origin
        source = f"def program({params}):\n    return {self.expression}\n"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            code = compile(source, filename, "exec")
        except SyntaxError as e:
            raise LaminaError(f"-c {self.expression!r} is not a Python expression: {e.msg}") from None
        namespace = {"torch": torch, "F": torch.nn.functional}
        exec(code, namespace)
        return namespace["program"]

    def example_inputs(self, seed: int = 0, device: str = "cpu") -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(seed)
        return tuple(i.random(generator).to(device) for i in self.inputs)

    def describe(self) -> str:
        return f"{self.expression}  with {', '.join(i.describe() for i in self.inputs)}"


def program_spec(code: str | None, inputs: list[str] | None) -> ProgramSpec:
    if code is None:
        if inputs:
            raise LaminaError("--input needs -c EXPR; without -c lamina uses its built-in example")
        return ProgramSpec(RUNNING_EXAMPLE, tuple(parse_input(t) for t in RUNNING_EXAMPLE_INPUTS), "<lamina example>")
    if not inputs:
        raise LaminaError("-c EXPR needs the shape of each input: add --input NAME=SHAPE for every name it uses")
    specs = tuple(parse_input(t) for t in inputs)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise LaminaError(f"an input is given twice: {', '.join(names)}")
    return ProgramSpec(code, specs)

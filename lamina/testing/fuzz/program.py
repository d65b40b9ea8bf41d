"""A fuzzed program: Python source a person can read, and the inputs it runs on, both from one seed.

The program is a function ``program(x0, x1, ...)`` written out as text; its inputs are made
by a few lines of PyTorch run after ``torch.manual_seed(seed)``. ``repro()`` joins the two
into a script that reproduces a failure without the fuzzer.
"""

from __future__ import annotations

from typing import Callable

import attrs
import torch


@attrs.frozen
class Program:
    seed: int
    dtype: str
    #: ``def program(...):`` and its body.
    source: str
    #: One ``name = torch....`` line per input, run in order after ``torch.manual_seed(seed)``.
    input_lines: tuple[str, ...]
    input_names: tuple[str, ...]

    def function(self) -> Callable:
        namespace = {"torch": torch}
        exec(compile(self.source, f"<fuzz program {self.seed}>", "exec"), namespace)
        return namespace["program"]

    def inputs(self) -> tuple[torch.Tensor, ...]:
        namespace = {"torch": torch}
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            exec(compile("\n".join(self.input_lines), f"<fuzz inputs {self.seed}>", "exec"), namespace)
        return tuple(namespace[name] for name in self.input_names)

    def repro(self) -> str:
        """A script that runs the program eagerly and compiled: paste it into a test."""
        names = ", ".join(self.input_names)
        packed = names + ("," if len(self.input_names) == 1 else "")
        return "\n".join([
            "import torch", "import lamina", "", "", self.source, "",
            f"torch.manual_seed({self.seed})", *self.input_lines,
            f"expected = program({names})",
            f"actual = lamina.compile(program, ({packed}))({names})",
        ])

"""What a provider registered through a hook must look like.

These protocols are the other half of ``hookspecs.py``: a hook hands its ``register``
callable a provider, and the pipeline later calls the provider through the methods
below. Every provider has a ``name`` (unique within its kind) and a ``priority``
(higher wins when several could serve; ties are broken by name, never by the order
in which plugins were loaded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from lamina.core.ir import kernel_ir, loop_ir, tensor_ir, tile_ir, torch_ir
    from lamina.core.ir.tensor_builder import TensorBuilder
    from lamina.core.target import Target


Decomposition = Callable[["TensorBuilder", "torch_ir.Node"], "str | tuple[str, ...]"]
"""Rewrites one Torch IR node with Tensor IR primitives.

Called with a builder (which resolves the node's tensor arguments and appends
primitives) and the node; returns the name of the value that holds the node's
result (a tuple of names for ops with several results).
"""


@runtime_checkable
class FusionRule(Protocol):
    name: str
    priority: int

    def apply(
        self, program: "loop_ir.Program", target: "Target", knobs: Mapping[str, Any]
    ) -> "loop_ir.Program | None":
        """Return a program with one or more fusions made, or None when nothing applies.

        ``target`` is the device the program is compiled for, for rules whose answer
        depends on it (whether splitting a reduction across blocks pays depends on the
        number of SMs); ``knobs`` are the decisions the user pinned in the config.
        """


@runtime_checkable
class Schedule(Protocol):
    """How a family of loop kernels runs on the GPU.

    A schedule may also offer ``estimate_cost(kernel, target) -> float``: the time in
    microseconds it expects ``kernel`` to take with the knob settings it would choose,
    computed without running anything. The ``cost_model`` selection policy takes the
    cheapest estimate; schedules without one rank after those with one, by priority.
    A renamed schedule may list its old names in ``former_names``: the configuration may
    still name it by them for one release, with a ``DeprecationWarning``.
    """

    name: str
    priority: int

    def applies(self, kernel: "loop_ir.Kernel", target: "Target") -> bool:
        """Whether this schedule can run ``kernel`` correctly."""

    def schedule(self, kernel: "loop_ir.Kernel", target: "Target", knobs: Mapping[str, Any]) -> "tile_ir.TileKernel":
        """Decide how ``kernel`` runs; ``knobs`` pins decisions the user fixed in the config."""

    def lower(self, tile: "tile_ir.TileKernel", target: "Target") -> "kernel_ir.Kernel":
        """Write the scheduled kernel as Kernel IR."""


@runtime_checkable
class KernelPass(Protocol):
    name: str
    priority: int

    def apply(self, kernel: "kernel_ir.Kernel", target: "Target") -> "kernel_ir.Kernel":
        """Return the kernel rewritten (or unchanged)."""


@runtime_checkable
class SelectionPolicy(Protocol):
    name: str

    def choose(self, kernel: "loop_ir.Kernel", candidates: Sequence["Schedule"], target: "Target") -> "Schedule":
        """Pick one of ``candidates`` (all apply to ``kernel``, best priority first)."""


class Runner(Protocol):
    def __call__(self, *tensors: Any) -> list[Any]:
        """Run the program on tensors already checked against the compiled signature."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def available(self) -> str | None:
        """None when the backend can run here, else a sentence saying why not."""

    def emit(self, program: "kernel_ir.Program", target: "Target") -> "Mapping[str, str] | None":
        """Source text per kernel name (the printed last level), or None if the backend has none."""

    def load(self, compilation: Any, target: "Target") -> Runner:
        """Prepare ``compilation`` (a ``lamina.core.pipeline.Compilation``) to run."""

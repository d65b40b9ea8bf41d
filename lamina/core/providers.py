"""What a provider registered through a hook must look like.

These protocols are the other half of ``hookspecs.py``: a hook hands its ``register``
callable a provider, and the pipeline later calls the provider through the methods
below. Every provider has a ``name`` (unique within its kind) and a ``priority``
(higher wins when several could serve; ties are broken by name, never by the order
in which plugins were loaded).

Schedules and fusion rules that read knobs declare them (``lamina.core.knobs``):

- ``knob_names``: a tuple of the knob names it takes. The user pins them as
  ``<name>.<knob>`` (``contraction.block_k = 32``, ``LAMINA_KNOB_CONTRACTION__BLOCK_K=32``),
  and the provider receives only those, as a mapping from knob name to value; pinning a
  knob it does not declare is a ``ConfigError``. A provider that declares no
  ``knob_names`` receives only knobs pinned without a schedule's name (deprecated).
- ``knob_namespace`` (optional): the name its knobs are pinned under, where it is not
  its own ``name``; a fusion rule that decides for a schedule shares that schedule's
  (the rule that splits contractions across blocks takes ``contraction.split_k`` and the
  contraction's tiling knobs, to estimate the kernels it would make).
- ``former_knob_names`` (optional): knobs it renamed, under their old names, still accepted
  for one release; the provider reads each as its new name and warns.
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
    """A rewrite of Loop IR programs; one that reads knobs also declares ``knob_names`` (above)."""

    name: str
    priority: int

    def apply(
        self, program: "loop_ir.Program", target: "Target", knobs: Mapping[str, Any]
    ) -> "loop_ir.Program | None":
        """Return a program with one or more fusions made, or None when nothing applies.

        ``target`` is the device the program is compiled for, for rules whose answer
        depends on it (whether splitting a reduction across blocks pays depends on the
        number of SMs); ``knobs`` are the decisions the user pinned for this rule, its
        declared ``knob_names`` only (empty where none are pinned).
        """


@runtime_checkable
class Schedule(Protocol):
    """How a family of loop kernels runs on the GPU.

    A schedule may also offer ``estimate_cost(kernel, target) -> float``: the time in
    microseconds it expects ``kernel`` to take with the knob settings it would choose,
    computed without running anything. The ``cost_model`` selection policy takes the
    cheapest estimate; schedules without one rank after those with one, by priority.

    A schedule that reads knobs declares ``knob_names`` (a tuple), and may declare
    ``knob_namespace`` (see the top of this module).

    A renamed schedule may list its old names in ``former_names``: the configuration may
    still name it by them for one release, with a ``FutureWarning``.

    A schedule that runs kernels whose extents are known only at run time (``s0``, see
    ``lamina.core.ir.sizes``) says so with ``symbolic_sizes = True``; only such schedules are
    offered those kernels. Its Kernel IR then reads each symbol as a variable of that name.

    A schedule may offer ``best_settings(kernel, target, count)``: its ``count`` cheapest settings
    by its cost model, cheapest first, each a ``lamina.core.selection.Setting`` whose knobs, pinned,
    make ``schedule`` choose it; the first is the one it chooses with nothing pinned. A policy
    that measures (the autotuner) takes its candidates from there.
    """

    name: str
    priority: int

    def applies(self, kernel: "loop_ir.Kernel", target: "Target") -> bool:
        """Whether this schedule can run ``kernel`` correctly."""

    def schedule(self, kernel: "loop_ir.Kernel", target: "Target", knobs: Mapping[str, Any]) -> "tile_ir.TileKernel":
        """Decide how ``kernel`` runs; ``knobs`` are the decisions the user pinned for this
        schedule (``<name>.<knob>``), its declared ``knob_names`` only, by knob name."""

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
    """Chooses the schedule of each kernel among those that apply.

    A policy may also offer ``select(kernel, candidates, context) -> Selection`` (see
    ``lamina.core.selection``), which the pipeline then calls instead of ``choose``: it may pin
    knobs of the schedule it picks (where the user pinned none of that schedule's) and give the
    Tile IR a line saying why. A policy whose choices depend on more than the kernel and the
    configuration (a database of measurements) offers ``cache_key(config) -> str``, which changes
    whenever they may, so that the program cache never serves a program chosen otherwise.
    """

    name: str

    def choose(self, kernel: "loop_ir.Kernel", candidates: Sequence["Schedule"], target: "Target") -> "Schedule":
        """Pick one of ``candidates`` (all apply to ``kernel``, best priority first)."""


class Runner(Protocol):
    def __call__(self, *tensors: Any) -> list[Any]:
        """Run the program on tensors already checked against the compiled signature."""


@runtime_checkable
class Backend(Protocol):
    """Runs compiled programs. A backend may also have ``compile_while_lowering(compilation)``,
    which the pipeline calls before it lowers a program that will run on this backend: it returns
    an object whose ``add(kernel, repeats)`` the pipeline calls with each kernel as soon as it is
    lowered, in program order (``repeats``: the name of the earlier kernel whose Kernel IR it took,
    renamed, or None), and which the pipeline keeps as ``compilation.prepared`` for ``load``. The
    CUDA backend compiles each new kernel there while the rest are lowered."""

    name: str

    def available(self) -> str | None:
        """None when the backend can run here, else a sentence saying why not."""

    def emit(self, program: "kernel_ir.Program", target: "Target") -> "Mapping[str, str] | None":
        """Source text per kernel name (the printed last level), or None if the backend has none."""

    def load(self, compilation: Any, target: "Target") -> Runner:
        """Prepare ``compilation`` (a ``lamina.core.pipeline.Compilation``) to run."""

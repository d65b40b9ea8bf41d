"""Runs the stages in order and keeps every level for inspection.

Torch IR -> (decompositions) Tensor IR -> (lowering, fusion rules) Loop IR ->
(schedules) Tile IR -> (schedule lowering, kernel passes) Kernel IR -> (backend) source.
Each level is verified as it is produced and shown to the observers.
"""

from __future__ import annotations

import functools
import time
import types
from typing import Any, Callable

import attrs

from lamina.core.config import Config, size_limit, user_cache_dir
from lamina.core.errors import ConfigError, LaminaError, NoSettingRuns, PluginError, ScheduleError, SymbolicSizeError
from lamina.core.ir import kernel_ir, loop_ir, sizes, tensor_ir, tile_ir, torch_ir
from lamina.core.knobs import sort_out, warn_unused
from lamina.core.plugins import PluginManager
from lamina.core.fresh_stack import on_fresh_stack
from lamina.core.garbage_collection import cycle_collector_paused
from lamina.core.program_cache import ProgramCache, code_digest, program_key
from lamina.core.progress import CompileProgress
from lamina.core.providers import Backend
from lamina.core.selection import Selection, SelectionContext
from lamina.core.stages.decompose import decompose
from lamina.core.stages.fuse import fuse
from lamina.core.stages.lower_to_kernels import KernelLowering
from lamina.core.stages.lower_to_loops import lower_to_loops
from lamina.core.stages.update_in_place import updated_buffers, write_updates_in_place
from lamina.core.target import Target
from lamina.core.timings import Timings

LEVELS = ("torch", "tensor", "loop", "tile", "kernel", "cuda")


@attrs.define
class Compilation:
    """Every level of one compiled program."""

    target: Target
    graph: torch_ir.Graph
    tensor: tensor_ir.Program | None = None
    loop: loop_ir.Program | None = None
    tiles: tuple[tile_ir.TileKernel, ...] = ()
    kernels: kernel_ir.Program | None = None
    #: The configuration it was compiled under, for the backend that loads it (its ``cache_dir``).
    config: Config | None = None
    #: Prints each kernel's CUDA source (None where no CUDA backend is registered).
    emit_sources: Callable[[], dict[str, str]] | None = None
    _sources: dict[str, str] | None = None
    #: Where the compile's time went (``lamina compile --timings``).
    timings: Timings = attrs.field(factory=Timings)
    #: The program cache's key of this program (None where it is not cached): a backend may keep
    #: its own work for the program under it (the CUDA backend's printed sources).
    key: str | None = None
    #: What the backend that will run the program did with its kernels while they were lowered
    #: (``Backend``'s optional ``compile_while_lowering``), for its ``load``; never stored.
    prepared: Any = None

    @property
    def sources(self) -> dict[str, str]:
        """Each kernel's CUDA source by kernel name, printed when first asked for: a model's
        hundreds of kernels take seconds to print, and running them does not need it."""
        if self._sources is None:
            with self.timings.stage("CUDA printing"):
                self._sources = dict(self.emit_sources() or {}) if self.emit_sources is not None else {}
        return self._sources

    def ir(self, level: str) -> str:
        """The printed form of ``level`` (one of ``LEVELS``)."""
        if level == "torch":
            return torch_ir.format_graph(self.graph)
        if level == "tensor":
            return tensor_ir.format_program(self.tensor)
        if level == "loop":
            return loop_ir.format_program(self.loop)
        if level == "tile":
            return "\n\n".join(tile_ir.format_tile_kernel(t) for t in self.tiles)
        if level == "kernel":
            return kernel_ir.format_program(self.kernels)
        if level == "cuda":
            return "\n".join(self.sources[k.name] for k in self.kernels.kernels)
        raise LaminaError(f"unknown IR level {level!r}; choose one of {', '.join(LEVELS)}")


class Pipeline:
    def __init__(self, config: Config, plugins: PluginManager):
        self.config = config
        self.plugins = plugins
        self.registry = plugins.registry

    def target(self, arch: str | None = None) -> Target:
        """The configured target, else the one for ``arch``, else sm_90."""
        name = self.config.target or arch or "sm_90"
        entry = self.registry.get("target", name)
        if entry is None:
            known = ", ".join(self.registry.names("target")) or "none"
            raise ConfigError(f"unknown target {name!r}; registered targets: {known}")
        return entry.provider

    def compile(self, graph: torch_ir.Graph, target: Target, backend: Backend | None = None) -> Compilation:
        """Every level of ``graph`` compiled for ``target``: from the program cache where an earlier
        compile of the same graph, target, settings and code left it, else through the stages
        (with Python's cycle collector paused, ``garbage_collection``, on a thread of their own,
        ``fresh_stack``), then stored there from a thread of its own. ``backend``, the one that will run the program, may take each kernel as
        it is lowered (its optional ``compile_while_lowering``)."""
        with cycle_collector_paused():
            return self._compile_or_load(graph, target, backend)

    def _compile_or_load(self, graph: torch_ir.Graph, target: Target, backend: Backend | None) -> Compilation:
        cache, key = self._program_cache(graph, target)
        if key is not None:
            started = time.perf_counter()
            cached = cache.get(key)
            if cached is not None:
                cached.key = key
                return self._reused(cached, time.perf_counter() - started)
        progress = CompileProgress(self.config.progress)
        try:
            compilation = self._compile(graph, target, progress, backend)
        finally:
            progress.done()
        if key is not None:
            compilation.key = key
            # stored while the backend compiles the kernels; the stored copy's timings are its own,
            # which the backend's stages do not change meanwhile (a cached compile gets new ones)
            cache.put_in_background(key, attrs.evolve(compilation, timings=Timings(), prepared=None))
        return compilation

    def cached_code(self) -> str | None:
        """A digest of the code a compile runs (lamina's and every plugin's), which keys the on-disk
        caches of compiles; None where they are off or cannot tell which code runs."""
        if not self.config.program_cache or not isinstance(self.plugins, PluginManager):
            return None  # a stand-in for the plugin manager (the conformance kit's) says not which code runs
        modules = [info.module for info in self.plugins.plugins if info.status == "loaded"]
        for plugin in self.plugins.pm.get_plugins():  # plugins registered by hand as well
            modules.append(getattr(plugin, "__name__", None) if isinstance(plugin, types.ModuleType)
                           else type(plugin).__module__)
        return code_digest(tuple(modules)) if all(modules) else None

    def cache(self, folder: str = "programs") -> ProgramCache:
        """The on-disk cache of compiles in ``folder`` of the cache directory."""
        return ProgramCache(self.config.cache_dir or user_cache_dir(), size_limit(self.config), folder)

    def _program_cache(self, graph: torch_ir.Graph, target: Target) -> tuple[ProgramCache | None, str | None]:
        code = self.cached_code()
        if code is None:
            return None, None
        settings = attrs.evolve(self.config, cache_dir=None, progress=True, source=None, cache_size_limit=None)
        hints = sizes.hints() if any(sizes.is_symbolic(i.type.shape) for i in graph.inputs) else {}
        policy = self.registry.get("selection_policy", self.config.selection)
        chosen_by = getattr(policy.provider, "cache_key", None) if policy is not None else None
        extra = ([sorted(hints.items())] if hints else []) + ([chosen_by(self.config)] if chosen_by is not None else [])
        key = program_key(graph, target, (settings, *extra) if extra else settings, code)
        return self.cache(), key

    def _reused(self, compilation: Compilation, seconds: float) -> Compilation:
        """A cached compilation as this compile's: this configuration, its own timings, shown to the observers."""
        compilation.config = self.config
        compilation.timings = Timings()
        compilation.timings.add("loading from the program cache", seconds)
        for level, ir in (("torch", compilation.graph), ("tensor", compilation.tensor), ("loop", compilation.loop),
                          ("tile", compilation.tiles), ("kernel", compilation.kernels)):
            self._observe(level, ir, compilation)
        if compilation.emit_sources is not None and self.plugins.observed():
            self._observe("cuda", compilation.sources, compilation)
        return compilation

    def _compile(self, graph: torch_ir.Graph, target: Target, progress: CompileProgress,
                 backend: Backend | None = None) -> Compilation:
        knobs = self.knobs()
        c = Compilation(target=target, graph=graph, config=self.config)
        torch_ir.verify_graph(graph)
        self._observe("torch", graph, c)

        on_fresh_stack(lambda: self._stages(c, knobs, progress, backend))

        cuda = self.registry.get("backend", "cuda")
        if cuda is not None:
            c.emit_sources = functools.partial(cuda.provider.emit, c.kernels, target)
            if self.plugins.observed():
                self._observe("cuda", c.sources, c)
        return c

    def _stages(self, c: Compilation, knobs: dict[str, dict[str, dict[str, Any]]], progress: CompileProgress,
                backend: Backend | None) -> None:
        """Torch IR to Kernel IR, each level verified and shown to the observers (on a fresh stack)."""
        timings, target = c.timings, c.target
        self._fuse(c, knobs, progress)

        scheduled = []
        with timings.stage("scheduling"):
            for done, k in enumerate(c.loop.kernels):
                progress.update("scheduling", done, len(c.loop.kernels))
                started = time.perf_counter()
                scheduled.append(self.schedule_kernel(k, target, knobs["schedule"]))
                timings.add_kernel(k.name, time.perf_counter() - started)
        chosen = [s for s, _ in scheduled]
        warn_unused(self.config.knobs, self._knob_takers(), chosen, self.config.strict)
        c.tiles = tuple(t for _, t in scheduled)
        for t in c.tiles:
            tile_ir.verify_tile_kernel(t, target.max_threads_per_block, target.max_shared_bytes_optin)
        self._observe("tile", c.tiles, c)

        early = getattr(backend, "compile_while_lowering", None)
        c.prepared = early(c) if early is not None else None
        self._lower_to_kernels(c, chosen, progress)

    def _fuse(self, c: Compilation, knobs: dict[str, dict[str, dict[str, Any]]], progress: CompileProgress) -> None:
        """Torch IR to fused Loop IR (``c.tensor``, ``c.loop``)."""
        timings, graph = c.timings, c.graph
        ops = {name: self.registry.get("op", name).provider for name in self.registry.names("op")}
        with timings.stage("decomposition"):
            c.tensor = decompose(graph, ops)
            tensor_ir.verify_program(c.tensor)
        self._observe("tensor", c.tensor, c)

        rules = [e.provider for e in self.registry.ranked("fusion_rule")]
        with timings.stage("lowering to loops"):
            loops = lower_to_loops(c.tensor)
        progress.update("fusion")
        with timings.stage("fusion"):
            c.loop = fuse(loops, rules, c.target, knobs["fusion_rule"], changed=lambda: progress.update("fusion"))
            c.loop = write_updates_in_place(c.loop, updated_buffers(graph, c.loop))
            loop_ir.verify_program(c.loop)
        self._observe("loop", c.loop, c)

    def _lower_to_kernels(self, c: Compilation, chosen: list[Any], progress: CompileProgress) -> None:
        """Tile IR to Kernel IR (``c.kernels``), each kernel handed to the backend as it is lowered
        where it asked (``c.prepared``)."""
        lowering = KernelLowering([e.provider for e in self.registry.ranked("kernel_pass")], c.target)
        kernels = []
        with c.timings.stage("lowering to kernels"):
            for done, (schedule, tile) in enumerate(zip(chosen, c.tiles)):
                progress.update("lowering to kernels", done, len(c.tiles))
                started = time.perf_counter()
                kernels.append(lowering.lower(schedule, tile))
                if c.prepared is not None:
                    c.prepared.add(kernels[-1], lowering.repeats.get(kernels[-1].name))
                c.timings.add_kernel(tile.kernel.name, time.perf_counter() - started)
        c.kernels = kernel_ir.Program(kernels, tuple(lowering.repeats.items()))
        self._observe("kernel", c.kernels, c)

    def knobs(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The configured knobs that each schedule and fusion rule receives, by kind and name;
        a ``ConfigError`` for a knob that no schedule or fusion rule of that name takes."""
        return sort_out(self.config.knobs, self._knob_takers(), self.config.strict)

    def _knob_takers(self) -> dict[str, list[Any]]:
        return {kind: [e.provider for e in self.registry.ranked(kind)] for kind in ("schedule", "fusion_rule")}

    def schedule_kernel(self, kernel: loop_ir.Kernel, target: Target,
                        knobs: dict[str, dict[str, Any]]) -> tuple[Any, tile_ir.TileKernel]:
        """The chosen schedule and its Tile IR. A schedule that finds no setting able to run the
        kernel (``NoSettingRuns``), or that needs a number where a size is known only at run time
        (``SymbolicSizeError``), passes it on to the next choice, down to ``generic``; the Tile IR
        says which schedules were passed over and why."""
        passed_over: list[tuple[str, str]] = []
        excluded: set[str] = set()
        needs_numbers: SymbolicSizeError | None = None
        while True:
            try:
                selection = self.choose_schedule(kernel, target, excluded)
            except ScheduleError:
                if needs_numbers is not None:  # every schedule that takes symbolic sizes needed a number
                    raise needs_numbers
                raise
            schedule = selection.schedule
            try:
                tile = self._scheduled(kernel, target, selection, knobs[schedule.name])
            except (NoSettingRuns, SymbolicSizeError) as e:
                if isinstance(e, SymbolicSizeError):
                    needs_numbers = e
                passed_over.append(("passed_over", f"{schedule.name}: {e}"))
                excluded.add(schedule.name)
                continue
            if passed_over:
                tile = attrs.evolve(tile, knobs=(*passed_over, *tile.knobs))
            return schedule, tile

    def _scheduled(self, kernel: loop_ir.Kernel, target: Target, selection: Selection,
                   pinned: dict[str, Any]) -> tile_ir.TileKernel:
        """The kernel scheduled as ``selection`` says: with its knobs where the user pinned none of the
        schedule's (the user's pins win); where the schedule refuses them (a setting chosen by other
        code), as the schedule chooses."""
        schedule, notes = selection.schedule, [selection.note] if selection.note else []
        if selection.knobs and pinned:
            notes.append(f"its knobs not used: the configuration pins {schedule.name}'s")
        elif selection.knobs:
            try:
                tile = schedule.schedule(kernel, target, dict(selection.knobs))
            except ScheduleError as e:
                notes.append(f"refused by {schedule.name} ({e}), which chose instead")
            else:
                return _noted(tile, notes)
        return _noted(schedule.schedule(kernel, target, pinned), notes)

    def choose_schedule(self, kernel: loop_ir.Kernel, target: Target, excluded: set[str] = frozenset()) -> Selection:
        """The schedule for ``kernel`` (and any knobs the selection policy pins), leaving out those
        named in ``excluded``."""
        candidates = self.candidate_schedules(kernel, target, excluded)
        if self.config.schedule is not None:
            pinned = self.registry.get("schedule", self.config.schedule)
            if pinned is None:
                known = ", ".join(self.registry.names("schedule"))
                raise ConfigError(f"the configured schedule {self.config.schedule!r} is not registered; known: {known}")
            if pinned.provider in candidates:
                return Selection(pinned.provider)
        if not candidates:
            raise ScheduleError(
                f"no schedule applies to loop kernel {kernel.name}:\n{loop_ir.format_kernel(kernel, '  ')}\n"
                "Register a schedule that handles it (see docs/plugins.md)."
            )
        policy = self.selection_policy()
        select = getattr(policy, "select", None)
        if select is None:
            selection = Selection(policy.choose(kernel, candidates, target))
        else:
            lowering = KernelLowering([e.provider for e in self.registry.ranked("kernel_pass")], target)

            def build(schedule: Any, pins: dict[str, Any]) -> tuple[tile_ir.TileKernel, kernel_ir.Kernel]:
                tile = schedule.schedule(kernel, target, pins)
                return tile, lowering.lower(schedule, tile)

            selection = select(kernel, candidates, SelectionContext(target, self.config, self.registry, build))
        _check_selection(selection, policy, kernel, candidates)
        return selection

    def candidate_schedules(self, kernel: loop_ir.Kernel, target: Target, excluded: set[str] = frozenset()) -> list[Any]:
        """The schedules the selection policy is offered for ``kernel``: those that apply (and take
        sizes known only at run time, where it has some), best priority first, less ``excluded``."""
        ranked = [e.provider for e in self.registry.ranked("schedule") if e.provider.name not in excluded]
        if loop_ir.has_symbolic_sizes(kernel):
            ranked = [s for s in ranked if getattr(s, "symbolic_sizes", False)]
        return [s for s in ranked if _applies(s, kernel, target)]

    def selection_policy(self) -> Any:
        """The configured selection policy."""
        policy = self.registry.get("selection_policy", self.config.selection)
        if policy is None:
            known = ", ".join(self.registry.names("selection_policy"))
            raise ConfigError(f"unknown selection policy {self.config.selection!r}; known: {known}")
        return policy.provider

    def _observe(self, level: str, ir: Any, compilation: Compilation) -> None:
        self.plugins.observe(level, ir, compilation)


def _check_selection(selection: Any, policy: Any, kernel: loop_ir.Kernel, candidates: list[Any]) -> None:
    """A ``PluginError`` naming the policy where its answer is not one the pipeline can use."""
    where = f"the selection policy {policy.name!r}, for kernel {kernel.name},"
    if not isinstance(selection, Selection):
        raise PluginError(f"{where} returned {selection!r} from select, not a lamina.core.selection.Selection")
    schedule = selection.schedule
    if not any(schedule is c for c in candidates):
        raise PluginError(f"{where} chose {getattr(schedule, 'name', schedule)!r}, which is not one of the schedules "
                          f"that apply: {', '.join(c.name for c in candidates)}")
    if selection.note is not None and not isinstance(selection.note, str):
        raise PluginError(f"{where} gave the note {selection.note!r}; a note is text or None")
    declared = getattr(schedule, "knob_names", None) or ()
    undeclared = [k for k, _ in selection.knobs if k not in declared]
    if undeclared:
        raise PluginError(f"{where} pinned {', '.join(undeclared)}, which {schedule.name} does not take; it takes "
                          f"{', '.join(declared) or 'no knobs'}")


def _noted(tile: tile_ir.TileKernel, notes: list[str]) -> tile_ir.TileKernel:
    """``tile`` with the selection policy's ``notes`` first among its knobs."""
    return attrs.evolve(tile, knobs=(("selection", "; ".join(notes)), *tile.knobs)) if notes else tile


def _applies(schedule: Any, kernel: loop_ir.Kernel, target: Target) -> bool:
    """Whether ``schedule`` applies to ``kernel``; not where it needs a number that a size known only
    at run time does not give."""
    try:
        return schedule.applies(kernel, target)
    except SymbolicSizeError:
        return False

"""``torch.compile(..., backend="lamina", mode="reduce-overhead")``: calls replayed from CUDA graphs.

A decoding step of a language model is hundreds of small kernels, and launching each from
Python takes longer than running it. With CUDA graphs a compiled graph is recorded once per
signature of its arguments and each later call is one replay. The arguments whose memory
changes from call to call (token ids, positions) are copied into buffers of the recording;
those that stay where they are (weights, a static key-value cache) are read in place. Which
is which is learnt from the first two calls: an argument at the same address in both is read
in place; if it moves later, the graph is recorded again with that argument copied. An
argument that the program updates (a key-value cache) is always used in place, since copying
it would mean copying it in before each replay and out after: where one moves (a new cache
for each ``generate`` call), the graph is recorded again with it where it now is, once it has
stayed there for two calls (a prompt's step, which sees a new cache at each call, then runs
without a graph rather than being recorded at every call).

The outputs of a replay are the recording's own buffers, which the next replay overwrites, so
each is cloned, as eager's outputs are the caller's to keep; the new values of mutated
arguments (AOTAutograd returns them first and copies them into the arguments at once) are not.
A call with an argument that is not on the GPU, or a program that cannot be recorded (it reads a
value back to the host), runs as without this mode; the latter with a warning.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import attrs
import torch

from lamina.api import signature
from lamina.core.errors import ConfigError

MAX_RECORDINGS = 8
"""The most CUDA graphs kept for one compiled graph. A graph whose sizes are symbolic (the decoding
step of a cache that grows) sees a new signature at almost every call; its later signatures run
without a graph rather than each holding a recording and its memory."""

MODES = {None: False, "default": False, "max-autotune-no-cudagraphs": False,
         "reduce-overhead": True, "max-autotune": True}
"""``torch.compile``'s modes, and whether each replays from CUDA graphs (as Inductor's do)."""


def uses_cuda_graphs(mode: str | None, option: Any) -> bool:
    """Whether ``mode`` or the ``cuda_graphs`` option asks for CUDA graphs."""
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; lamina takes {', '.join(repr(m) for m in MODES if m)}")
    if option not in (None, True, False):
        raise ConfigError(f"the cuda_graphs option is True or False, not {option!r}")
    return bool(option) if option is not None else MODES[mode]


def _address(value: Any) -> int | None:
    return value.data_ptr() if isinstance(value, torch.Tensor) else None


def _recordable(args: Sequence[Any]) -> bool:
    """Whether the tensor arguments are all on a GPU: a CPU one (a scalar beside GPU tensors, as
    a static cache's length before its first update) is read on the host at each call."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(t.is_cuda for t in tensors)


class _Recording:
    """One CUDA graph of ``run``, with buffers for the arguments listed in ``copied``.

    A decoding step replays at every token, before the GPU can start it, so what a replay does on
    the host is worked out once, here: which arguments' addresses to check, which to copy, and how
    each output is handed back (``_OutputPlan``)."""

    def __init__(self, run: Callable[..., Sequence[Any]], args: Sequence[Any], copied: frozenset[int],
                 mutated_outputs: int):
        self.copied = copied
        self.in_place = [i for i, a in enumerate(args) if i not in copied and isinstance(a, torch.Tensor)]
        self.addresses = [args[i].data_ptr() for i in self.in_place]
        self.inputs = [torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device) if i in copied else a
                       for i, a in enumerate(args)]
        self.copied_order = sorted(copied)
        self.buffers = [self.inputs[i] for i in self.copied_order]
        self._copy_in(args)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = tuple(run(*self.inputs))
        self.plans = [_OutputPlan.of(position, out, self, mutated_outputs) for position, out in enumerate(self.outputs)]

    def moved(self, args: Sequence[Any]) -> set[int]:
        """The arguments read in place that are not where they were when recorded."""
        now = [args[i].data_ptr() for i in self.in_place]
        if now == self.addresses:
            return set()
        return {i for i, address, recorded in zip(self.in_place, now, self.addresses) if address != recorded}

    def replay(self, args: Sequence[Any]) -> tuple:
        self._copy_in(args)
        self.graph.replay()
        return tuple(plan.output(out, args) for plan, out in zip(self.plans, self.outputs))

    def _copy_in(self, args: Sequence[Any]) -> None:
        """The copied arguments into the recording's buffers, in one launch."""
        if self.buffers:
            torch._foreach_copy_(self.buffers, [args[i] for i in self.copied_order])


@attrs.frozen
class _OutputPlan:
    """How a replay hands back one output of the recording: as the caller's argument where it is an
    argument read in place, as a view of the caller's argument where it is (a view of) a copied
    argument's buffer, as itself where it is a mutated input's new value, else as a clone, which
    the next replay cannot overwrite."""

    kind: str  # "argument", "view of argument", "itself" or "clone"
    argument: int = -1
    offset: int = 0

    @classmethod
    def of(cls, position: int, out: Any, recording: _Recording, mutated_outputs: int) -> _OutputPlan:
        if not isinstance(out, torch.Tensor):
            return cls("itself")
        storage = out.untyped_storage().data_ptr()
        for i in recording.copied_order:
            buffer = recording.inputs[i]
            if storage == buffer.untyped_storage().data_ptr():
                return cls("view of argument", i, out.storage_offset() - buffer.storage_offset())
        if position < mutated_outputs:
            return cls("itself")
        for i in recording.in_place:
            if out is recording.inputs[i]:
                return cls("argument", i)
        return cls("clone")

    def output(self, out: Any, args: Sequence[Any]) -> Any:
        if self.kind == "clone":
            return out.clone()
        if self.kind == "itself":
            return out
        if self.kind == "argument":
            return args[self.argument]
        argument = args[self.argument]
        return argument.as_strided(out.size(), out.stride(), argument.storage_offset() + self.offset)


class CudaGraphReplay:
    """``run`` (a compiled graph's call) replayed from one CUDA graph per signature of its
    arguments, or from one CUDA graph where the graph is ``static`` (its shapes do not vary:
    Dynamo guards them, and each argument's device, before the call reaches here)."""

    def __init__(self, run: Callable[..., Sequence[Any]], mutated_outputs: int, written: frozenset[int] = frozenset(),
                 static: bool = False):
        self.run = run
        self.mutated_outputs = mutated_outputs
        self.written = written
        self.static = static
        self._recordings: dict[Any, _Recording] = {}
        self._previous: dict[Any, list[int | None]] = {}
        self._unrecordable: set[Any] = set()

    def __call__(self, *args: Any) -> tuple:
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return tuple(self.run(*args))
        key = None if self.static else signature(args)
        if key in self._unrecordable:
            return tuple(self.run(*args))
        recording = self._recordings.get(key)
        moved = recording.moved(args) if recording is not None else set()
        if recording is not None and not moved:
            return recording.replay(args)
        if recording is None and len(self._recordings) >= MAX_RECORDINGS:
            return tuple(self.run(*args))
        addresses = [_address(a) for a in args]
        previous = self._previous.pop(key, None)
        self._previous[key] = addresses
        if len(self._previous) > 4 * MAX_RECORDINGS:  # the signatures seen longest ago go first
            self._previous.pop(next(iter(self._previous)))
        if previous is None or any(previous[i] != addresses[i] for i in self.written):
            # The first call compiles and loads the kernels; an argument updated in place that is
            # new since the last call may be new at every call (a prompt's step, with a new cache
            # for each generate call), where recording would cost more than it saves.
            return tuple(self.run(*args))
        if not _recordable(args):
            self._unrecordable.add(key)
            return tuple(self.run(*args))
        copied = {i for i, (a, b) in enumerate(zip(previous, addresses)) if a != b} | moved
        if recording is not None:
            copied |= recording.copied
        copied -= self.written
        try:
            recording = _Recording(self.run, args, frozenset(copied), self.mutated_outputs)
        except RuntimeError as error:
            self._unrecordable.add(key)
            warnings.warn(f"lamina could not record this program in a CUDA graph, so it runs without one: {error}",
                          stacklevel=2)
            return tuple(self.run(*args))
        self._recordings[key] = recording
        return recording.replay(args)

"""Running a kernel's candidates: compiled together, run on the same random inputs, checked against
the cost model's choice, and timed the way ``lamina bench`` times (CUDA-graph replays, median), a
kernel whose data L2 would hold rotating among sets of inputs that overflow it, as the bench's
cold figures do: in a model, a layer's weights come from memory at every call, and a kernel timed
on inputs that stay in L2 ranks its settings as it never runs.

The candidates reach the backend through the registry, as the pipeline's programs do: each is
loaded as a program of one kernel, with the kernel's own buffers as its inputs and outputs.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import statistics
from typing import Any, Callable, Sequence

import torch

from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir, loop_ir, sizes
from lamina.core.pipeline import Compilation
from lamina.core.selection import SelectionContext

LAUNCHES_PER_GRAPH = 20
"""Back-to-back launches in one recorded graph: one launch alone would time mostly the graph's own
launch latency."""
REPLAYS = 15
COLD_L2_MULTIPLE = 2
"""The input sets of a candidate's timing touch at least this many times the L2's bytes."""
MAX_INPUT_SETS = 32
"""A kernel that would need more sets is small enough to be timed warm, as the bench leaves such
cases without a cold figure."""
TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 1e-2, torch.bfloat16: 2e-2}
"""The largest relative error (``||out - ref|| / ||ref||``) of a candidate against the cost model's
choice: float32 candidates may multiply on tf32 pieces, 16-bit ones round in another order."""

Timer = Callable[[Callable[[], Any]], float]
"""Median microseconds of one call of a function of no arguments."""


def gpu_time_us(call: Callable[[], Any]) -> float:
    """Median microseconds of ``call()``, from CUDA-graph replays of ``LAUNCHES_PER_GRAPH`` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        for _ in range(LAUNCHES_PER_GRAPH):
            call()
    graph.replay()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / LAUNCHES_PER_GRAPH)
    return statistics.median(times)


def random_inputs(kernel: loop_ir.Kernel, device: torch.device, seed: int = 0) -> list[torch.Tensor]:
    """Inputs of the kernel's shapes (a symbolic size at its hint) and dtypes: floating point ones
    normal, booleans at random, other integers zero (an index or a position, in range whatever the
    size it indexes)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for buffer in kernel.inputs:
        shape = tuple(sizes.hint(s) for s in buffer.type.shape)
        dtype = torch_dtype(buffer.type.dtype)
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.rand(shape, generator=generator) < 0.5
        else:
            tensor = torch.zeros(shape, dtype=dtype)
        tensors.append(tensor.to(device))
    return tensors


def input_sets(kernel: loop_ir.Kernel, l2_bytes: int) -> int:
    """How many sets of inputs a candidate's timing rotates among: enough that what the calls read
    and write before a set comes round again is ``COLD_L2_MULTIPLE`` times the L2; one where a set
    alone is that much, or where more than ``MAX_INPUT_SETS`` would be needed."""
    moved = sum(math.prod(sizes.hint(s) for s in b.type.shape) * b.type.dtype.itemsize
                for b in kernel.inputs + kernel.outputs)
    sets = max(1, math.ceil(COLD_L2_MULTIPLE * l2_bytes / max(moved, 1)))
    return sets if sets <= MAX_INPUT_SETS else 1


def torch_dtype(dtype: Any) -> torch.dtype:
    return getattr(torch, dtype.name)


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    if out.shape != reference.shape:
        return float("inf")
    if not (out.is_floating_point() and reference.is_floating_point()):
        return 0.0 if torch.equal(out, reference) else float("inf")
    out, reference = out.double(), reference.double()
    if not torch.isfinite(out).all():
        return float("inf")
    scale = reference.norm().item()
    difference = (out - reference).norm().item()
    return difference if scale == 0 else difference / scale


class CandidateRuns:
    """Loads built candidates of one kernel on ``backend`` and runs and times them."""

    def __init__(self, kernel: loop_ir.Kernel, context: SelectionContext, backend: str, timer: Timer):
        entry = context.registry.get("backend", backend)
        if entry is None:
            raise LaminaError(f"tuning needs the {backend!r} backend, which is not registered")
        why_not = entry.provider.available()
        if why_not is not None:
            raise LaminaError(f"tuning measures kernels on a GPU, and none can run here: {why_not}. "
                              "Tune on the machine the programs will run on, then copy the database "
                              "(lamina tune --export / --import).")
        self.kernel, self.context, self.backend, self.timer = kernel, context, entry.provider, timer
        self.device = torch.device("cuda" if backend == "cuda" else "cpu")
        self.input_sets = [random_inputs(kernel, self.device, seed)
                           for seed in range(input_sets(kernel, context.target.l2_bytes))]

    def compilation(self, built: kernel_ir.Kernel) -> Compilation:
        k = self.kernel
        loop = loop_ir.Program(inputs=k.inputs, outputs=k.outputs, temporaries=(), kernels=(k,))
        return Compilation(target=self.context.target, graph=None, loop=loop, kernels=kernel_ir.Program((built,)),
                           config=self.context.config)

    def prepare(self, built: Sequence[kernel_ir.Kernel]) -> None:
        """Compiles the candidates at once, on the host's cores, where the backend compiles ahead of
        loading (NVRTC releases Python's lock); their loads then find them compiled."""
        compile_one = getattr(self.backend, "compile", None)
        if compile_one is None or len(built) < 2:
            return
        arch = self.backend.arch(self.context.target)
        folder = self.backend.cache_dir_for(self.compilation(built[0]))

        def compiled(kernel: kernel_ir.Kernel) -> None:
            try:
                compile_one(kernel_ir.Program((kernel,)), arch, folder)
            except LaminaError:
                pass  # its load below tells its own error

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(built), os.cpu_count() or 1)) as pool:
            list(pool.map(compiled, built))

    def run(self, built: kernel_ir.Kernel) -> tuple[list[torch.Tensor], Callable[[], float]]:
        """The candidate's outputs on the first set of random inputs, and a function that times it:
        its median time in microseconds, each time it is called, a call running it on every set in
        turn and holding every result until the last returns, so that each writes a buffer of its own."""
        runner = self.backend.load(self.compilation(built), self.context.target)
        sets = [[t.clone() for t in inputs] for inputs in self.input_sets]
        outputs = runner(*sets[0])

        def each_set() -> list[Any]:
            return [runner(*inputs) for inputs in sets]

        return [o.clone() for o in outputs], lambda: self.timer(each_set) / len(sets)

    def disagreement(self, outputs: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> str | None:
        """Why ``outputs`` are not the cost model's choice's, or None where they agree."""
        for buffer, out, expected in zip(self.kernel.outputs, outputs, reference):
            error = relative_error(out, expected)
            if error > TOLERANCE.get(expected.dtype, 0.0):
                return f"its {buffer.name} differs from the cost model's choice's by {error:.2g} (relative)"
        return None

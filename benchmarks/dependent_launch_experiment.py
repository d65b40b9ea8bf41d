"""Does launching each kernel as a programmatic dependent of the one before shorten the suite's
memory-bound kernels? Measured before building it in (the Kernel IR pass of
``lamina.builtin.kernel_passes``), which the script leaves out to start from the kernels without it.

    cd benchmarks && python dependent_launch_experiment.py [--variants NAME,NAME] [PATTERN ...]

A kernel launched with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` may start
while the kernel before it on the stream still runs; it must then execute
``griddepcontrol.wait`` before it touches memory that kernel wrote, which returns once that
kernel has finished and its stores are visible. What can overlap is the launch itself and the
blocks' scheduling, the ramp at the start of every kernel. ``griddepcontrol.launch_dependents``
lets the next kernel launch before this one's blocks have all exited.

Variants, each timed warm (as ``lamina bench`` does: 20 back-to-back calls in one CUDA graph
where torch.compile's call takes under 50 us, else one) and cold (rotating among
input sets that overflow L2, as ``lamina bench`` does), twice alternately. Compiled without the
built-in pass, the kernels edited and launched here:

- ``plain``: the CUDA as emitted, launched by ``cuLaunchKernel``;
- ``wait``: ``griddepcontrol.wait`` first in every kernel, launched as a dependent;
- ``trigger+wait``: ``griddepcontrol.launch_dependents`` and then the wait, launched as a dependent;
- ``prefetch``: as ``trigger+wait``, but before the wait one thread of each block asks L2 for the
  block's first loads (``cp.async.bulk.prefetch.L2``: the row of each row-loaded input in a
  kernel with a row per block, the block's span of each input read at ``vector * 4`` in a
  pointwise kernel). A prefetch only fills L2, where the previous kernel's stores land too, so
  it cannot read stale data.

Compiled with the built-in pass, which launches them as dependents itself:

- ``built_in``: as lamina emits them;
- ``built_in_wait_first``: the wait, then the trigger (as lamina emits them now): a kernel lets
  the next one launch only once the kernel before it has finished;
- ``built_in_trigger_first``: the trigger, then the wait, so that a chain of kernels may all launch
  while the first runs;
- ``built_in_wait_only``: without the trigger: the next kernel launches as this one's blocks exit;
- ``built_in_prefetch``: as emitted, but with the prefetches of ``prefetch`` before the wait;
- ``built_in_first_wave_prefetch``: the same, prefetched only by the blocks of the first wave
  (those that can start before the previous kernel ends).

Beside them: torch.compile, and a ``copy_`` of the case's bytes timed cold the same way.
"""

from __future__ import annotations

import argparse
import ctypes
import re

import torch

from edited_cuda import _matches, compiled_with_edit
from lamina.backends.cuda import dependent_launch, driver as lamina_driver
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.bench.runner import (CALLS_PER_SHORT_GRAPH, REFERENCE_DTYPE, SHORT_CALL_US, _repeated, _rotating,
                                 cold_set_count, copy_each, same_size_pairs)
from lamina.bench.suite import builtin_suite

COPY_CEILING_BYTES_PER_US = 4.27e6
BUILT_IN_OVERLAP = ("lamina.builtin.kernel_passes",)
KERNEL_OPENING = re.compile(r'^(extern "C" __global__ .*\{\n)', re.MULTILINE)
WAIT = '  asm volatile("griddepcontrol.wait;" ::: "memory");\n'
TRIGGER = '  asm volatile("griddepcontrol.launch_dependents;");\n'
DEFAULT_PATTERNS = ("*.rmsnorm.s2048.fp32", "*.add_rmsnorm.s2048.fp32", "*.rope_q.s2048.fp32",
                    "*.silu_mul.s2048.fp32", "*.rmsnorm.s128.fp32")
"""The cases of ``…_dependent_launch_prefetch.txt``; ``…_dependent_launch_experiment.txt`` names its own."""


ROW_START = "  int row = (int)blockIdx.x;\n"
ROW_LOAD = re.compile(r"const uint4\*>\(&(\w+)\[row \* (\d+) \+")
VECTOR_START = re.compile(r"  int vector = \(int\)blockIdx\.x \* (\d+) \+ \(int\)threadIdx\.x;\n")
VECTOR_LOAD = re.compile(r"const uint4\*>\(&(\w+)\[vector \* 4\]\)")


def with_prologue(prologue: str):
    return lambda source: KERNEL_OPENING.sub(lambda m: m.group(1) + prologue, source, count=1)


def _prefetch(address: str, size: str, guard: str) -> str:
    return (f'  if (threadIdx.x == 0{guard}) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" '
            f':: "l"({address}), "r"({size}) : "memory");\n')


def _prefetched(source: str, after: str, guard: str = "") -> str | None:
    """Prefetches of the block's first loads into L2 where their index is known, then ``after``;
    None for a kernel that is neither a row per block nor pointwise."""
    if ROW_START in source:
        rows = dict(ROW_LOAD.findall(source))
        prefetches = "".join(_prefetch(f"&{a}[row * {n}]", f"{int(n) * 4}", guard) for a, n in rows.items())
        return source.replace(ROW_START, ROW_START + prefetches + after, 1)
    start = VECTOR_START.search(source)
    if start:
        block = int(start.group(1))
        arrays = dict.fromkeys(VECTOR_LOAD.findall(source))
        prefetches = "".join(_prefetch(f"&{a}[(int)blockIdx.x * {block * 4}]", f"{block * 16}", guard)
                             for a in arrays)
        return source.replace(start.group(0), start.group(0) + prefetches + after, 1)
    return None


def with_prefetch(source: str) -> str:
    """The trigger first, the wait after the index of the block's first loads and their prefetches."""
    return _prefetched(KERNEL_OPENING.sub(lambda m: m.group(1) + TRIGGER, source, count=1), WAIT) or source


def launch_as_dependent(self, buffers):
    """``LaunchableKernel.__call__`` through ``cuLaunchKernelEx`` with programmatic stream serialization."""
    d = lamina_driver._driver()
    device = torch.cuda.current_device()
    function = self._functions.get(device) or self.prepare(device)
    pointers = self._pointers(buffers, device)
    values = (ctypes.c_void_p * len(pointers))(*pointers)
    base = ctypes.addressof(values)
    arguments = (ctypes.c_void_p * len(pointers))(*range(base, base + len(pointers) * 8, 8))
    config = dependent_launch.launch_config(d, self.grid, self.block, self.dynamic_shared_bytes)
    config.hStream = torch.cuda.current_stream(device).cuda_stream
    (result,) = d.cuLaunchKernelEx(config, function, ctypes.addressof(arguments), 0)
    lamina_driver.check(result, "cuLaunchKernelEx", self.name)


BUILT_IN_TRIGGER = f"  {dependent_launch.LET_NEXT_KERNEL_LAUNCH}\n"
BUILT_IN_WAIT = f"  {dependent_launch.WAIT_FOR_PREVIOUS_KERNEL}\n"


def _reordered(prologue: str):
    """The built-in prologue, in either order, replaced by ``prologue``."""
    def edit(source: str) -> str:
        for built_in in (BUILT_IN_WAIT + BUILT_IN_TRIGGER, BUILT_IN_TRIGGER + BUILT_IN_WAIT):
            source = source.replace(built_in, prologue, 1)
        return source
    return edit


LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\((\d+)\)")
SMS = 132
THREADS_PER_SM = 2048


def _built_in_prefetched(first_wave_only: bool):
    """The built-in wait and trigger after prefetches of the block's first loads, by every block
    or only by those of the first wave (as many as the SMs hold at once, going by threads)."""
    def edit(source: str) -> str:
        threads = int(LAUNCH_BOUNDS.search(source).group(1))
        guard = f" && (int)blockIdx.x < {SMS * (THREADS_PER_SM // threads)}" if first_wave_only else ""
        return _prefetched(_reordered("")(source), BUILT_IN_WAIT + BUILT_IN_TRIGGER, guard) or source
    return edit


VARIANTS = {
    "plain": (BUILT_IN_OVERLAP, None, False),
    "wait": (BUILT_IN_OVERLAP, with_prologue(WAIT), True),
    "trigger+wait": (BUILT_IN_OVERLAP, with_prologue(TRIGGER + WAIT), True),
    "prefetch": (BUILT_IN_OVERLAP, with_prefetch, True),
    "built_in": ((), None, False),
    "built_in_wait_first": ((), _reordered(BUILT_IN_WAIT + BUILT_IN_TRIGGER), False),
    "built_in_trigger_first": ((), _reordered(BUILT_IN_TRIGGER + BUILT_IN_WAIT), False),
    "built_in_wait_only": ((), _reordered(BUILT_IN_WAIT), False),
    "built_in_prefetch": ((), _built_in_prefetched(first_wave_only=False), False),
    "built_in_first_wave_prefetch": ((), _built_in_prefetched(first_wave_only=True), False),
}
"""Each variant: the plugins left out, the edit of the CUDA, and whether this script launches
the kernels as dependents (the built-in pass's kernels launch so by themselves)."""


def main(patterns, variants) -> None:
    original_call = lamina_driver.LaunchableKernel.__call__
    torch.manual_seed(0)
    for case in builtin_suite():
        if not _matches(case.name, patterns):
            continue
        fn = case.program().function()
        inputs = case.program().example_inputs(seed=0, device="cuda")
        wider = REFERENCE_DTYPE.get(case.dtype, torch.float64)
        with torch.no_grad():
            reference = fn(*(t.to(wider) if t.is_floating_point() else t for t in inputs))
        sets = cold_set_count(case) if case.memory_bound else 0
        rotation = [inputs] + [case.program().example_inputs(seed=k, device="cuda") for k in range(1, sets)]
        inductor = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            inductor(*inputs)
        short = time_cuda_graph(inductor, inputs, replays=20) < SHORT_CALL_US
        calls = CALLS_PER_SHORT_GRAPH if short else 1

        def timings(f):
            warm = time_cuda_graph(_repeated(f, calls), inputs, replays=100) / calls
            cold = time_cuda_graph(_rotating(f, rotation), (), replays=100) / sets if sets else None
            return warm, cold

        def percent(us):
            return f"{case.bytes_moved / us / COPY_CEILING_BYTES_PER_US:.0%}" if us else "-"

        print(f"{case.name}  ({case.bytes_moved / 1e6:.1f} MB, {calls} calls per warm graph, {sets} cold sets)",
              flush=True)
        warm, cold = timings(inductor)
        print(f"  {'torch.compile':20s} warm {warm:8.2f} us  cold {cold or 0:8.2f} us ({percent(cold)})", flush=True)
        if sets:
            copy = time_cuda_graph(copy_each(same_size_pairs(case, "cuda", sets)), (), replays=100) / sets
            print(f"  {'same-size copy':20s} {'':20s}cold {copy:8.2f} us ({percent(copy)})", flush=True)
        for label in [*variants, *variants]:
            disable, edit, dependent = VARIANTS[label]
            lamina_driver.LaunchableKernel.__call__ = launch_as_dependent if dependent else original_call
            try:
                compiled, output, edited = compiled_with_edit(edit, fn, inputs, {}, disable=disable)
                error = relative_error(output, reference)
                warm, cold = timings(compiled)
            finally:
                lamina_driver.LaunchableKernel.__call__ = original_call
            print(f"  {label:20s} warm {warm:8.2f} us  cold {cold or 0:8.2f} us ({percent(cold)})  "
                  f"error {error:.1e}{'' if edited or edit is None else '  NOT EDITED'}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="plain,wait,trigger+wait,prefetch",
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("patterns", nargs="*", default=DEFAULT_PATTERNS)
    arguments = parser.parse_args()
    main(arguments.patterns, arguments.variants.split(","))

"""Suite cases timed with the CUDA that lamina emits edited, to measure a change to code
generation before building it into a schedule."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import torch

import lamina
from lamina.backends.cuda import backend
from lamina.bench.measure import time_cuda_graph
from lamina.bench.suite import builtin_suite

TWO_BUFFER_MAIN_LOOP = re.compile(
    r"  for \(int kt = 0; kt < (?P<T>\d+); \+\+kt\) \{\n"
    r"    asm volatile\(\"cp\.async\.wait_group 0;\\n\" ::: \"memory\"\);\n"
    r"    __syncthreads\(\);\n"
    r"    if \(kt \+ 1 < (?P=T)\) \{\n(?P<copies>(?:      .*\n)+?)    \}\n"
    r"    #pragma unroll\n"
    r"    for \(int kk = 0; kk < (?P<K>\d+); \+\+kk\) \{\n(?P<body>(?:      .*\n)+?)    \}\n"
    r"  \}\n")
"""The contraction schedule's main loop with two buffers and the copies issued at once, as
emitted: ``T`` k-tiles, the next k-tile's ``copies``, and the ``body`` of its ``K`` steps."""

ROW_REDUCTION_START = "  int row = (int)blockIdx.x;\n"
"""The first statement of a row-reduction kernel with one row per block, as emitted."""

Edit = Callable[[str], str]
"""A kernel's CUDA source to the edited source (unchanged where the edit does not apply)."""


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), name) for p in patterns)


def compiled_with_edit(edit: Edit | None, fn: Callable, inputs: tuple, knobs: dict, disable: tuple[str, ...] = ()):
    """``fn`` compiled with ``knobs`` and the plugins ``disable`` names left out, and called once on
    ``inputs`` while ``edit`` applies to the CUDA the backend emits (that first call loads the
    kernels): the compiled program, its output, and whether the edit changed any kernel."""
    original = backend.emit_cuda
    edited = []

    def emit(kernel):
        source = original(kernel)
        changed = edit(source) if edit is not None else source
        edited.append(changed != source)
        return changed

    backend.emit_cuda = emit
    try:
        compiled = lamina.Compiler(knobs=knobs, disable=disable).compile(fn, inputs)
        output = compiled(*inputs)
    finally:
        backend.emit_cuda = original
    return compiled, output, any(edited)


def time_variants(patterns: Sequence[str], variants: Sequence[tuple[str, dict, Edit | None]]) -> None:
    """For each suite case whose name matches a glob of ``patterns``, every variant (a label,
    the knobs pinned, an edit or None for the CUDA as emitted) twice, alternately, by CUDA-graph
    replay, each checked against eager PyTorch first: one line per case. A variant whose edit
    changes none of the case's kernels is reported as not edited. The first call runs while the
    edit is in place: the CUDA backend emits the CUDA it compiles when it loads the kernels."""
    with torch.no_grad():
        for case in builtin_suite():
            if not _matches(case.name, patterns):
                continue
            fn = case.program().function()
            inputs = case.program().example_inputs(seed=0, device="cuda")
            reference = fn(*inputs)
            line = [f"{case.name:36s}"]
            for label, knobs, edit in [*variants, *variants]:
                compiled, output, edited = compiled_with_edit(edit, fn, inputs, knobs)
                if edit is not None and not edited:
                    line.append(f"{label}: not edited")
                    continue
                error = ((output - reference).abs().max() / reference.abs().max()).item()
                us = time_cuda_graph(compiled, inputs, replays=50)
                line.append(f"{label} {us:.1f} us (error {error:.1e})")
            print(" | ".join(line), flush=True)

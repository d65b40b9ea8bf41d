"""The schedule settings that the kernel suite and the model matrix use, and one small kernel of each.

A *setting* is what shapes a kernel's CUDA beyond its sizes: the schedule, the dtypes it reads
and writes, how the reduction is combined (serially, by warp shuffles, a block tree, in-block
k-splits, a cluster, the last block to finish), what is staged in shared memory and how (copy
kind and width, buffers, padding or swizzle), vector widths, where products run (FMA, mma.sync,
wgmma), split-K partial sums, two sums side by side (a gated MLP's pair), warp patches, grouped
block order, and the schedule's own switches (rows held in registers, epilogue reads prefetched,
guarded vector loads, ...). Tile sizes and thread counts are not part of it: they change numbers
in the code, not its structure.

Each setting gets one *representative*: the kernel with that setting whose program does the
least work (loop iterations summed over its kernels). A suite case that does more than
``SMALL_WORK`` is compiled again at smaller sizes (``SHRINK_RULES``: fewer rows, heads and
output columns, then also a shorter reduction or softmax row) with every knob of its chosen
setting pinned, and the first smaller program whose kernel has the same setting stands in for
it; where none has, the pins are dropped, and failing that the case keeps its size. Under
racecheck a kernel runs 10 to 100 times slower, and the suite's largest cases would take minutes.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import re
from typing import Any, Callable, Iterable

import attrs
import torch

import lamina
from lamina.bench.suite import Case, builtin_suite
from lamina.core.errors import LaminaError
from lamina.core.ir import loop_ir, tile_ir
from lamina.program_spec import InputSpec, ProgramSpec

TARGET = "sm_90"
"""The H200's architecture: the settings are those lamina chooses there."""
SMALL_WORK = 1 << 20
"""Loop iterations (summed over a program's kernels) below which a case runs as it is."""
PRODUCTS = {None: "fma", "3xtf32": "mma_sync", "wgmma 3xtf32": "wgmma", "wgmma 16-bit tma": "wgmma_tma"}
MODEL_SEED = 0


# --- the setting of one kernel -------------------------------------------------------------------

def setting_of(tk: tile_ir.TileKernel) -> tuple[tuple[str, str], ...]:
    """The features of ``tk`` that change the structure of its CUDA, as (name, value) pairs."""
    knobs = dict(tk.knobs)
    features = [("schedule", tk.schedule), ("dtypes", _dtypes(tk.kernel))]
    r = tk.reduction
    if r is not None:
        features.append(("reduction", r.strategy))
        if r.cluster_blocks > 1:
            features.append(("cluster", "yes"))
        if tk.schedule == "contraction" and r.splits > 1:
            features.append(("in_block_k_splits", "yes"))
    stages = sorted({_stage_text(s) for s in tk.stages})
    if stages:
        features.append(("shared", "; ".join(stages)))
    if tk.vector_width > 1:
        features.append(("vector_width", str(tk.vector_width)))
    features += _settings_features(tk.settings)
    features += _schedule_switches(tk.schedule, knobs)
    return tuple(features)


def _settings_features(settings: Any) -> list[tuple[str, str]]:
    """What a schedule's own settings change in the CUDA: the contraction's way of issuing its
    products and arranging its blocks, the attention's warpgroups and masks, the decode's
    products and key ranges."""
    if settings is None:
        return []
    features = []
    if hasattr(settings, "products"):
        features.append(("products", PRODUCTS.get(settings.products, str(settings.products))))
    if getattr(settings, "warp_patch", None) is not None:
        features.append(("warp_patch", "x".join(map(str, settings.warp_patch))))
    for name, feature in (("grouped_rows", "grouped_rows"), ("batch_rows", "batch_as_rows"),
                          ("cluster_blocks", "cluster"), ("splits", "key_ranges_combined")):
        if getattr(settings, name, 1) > 1:
            features.append((feature, "yes"))
    for name, feature in (("copy_steps", "copies_spread"), ("paired", "paired_sums"),
                          ("early_read_registers", "early_reads"), ("slice_sums_bytes", "cluster_slices"),
                          ("causal", "causal"), ("windowed", "windowed"), ("key_block_flags", "key_block_flags"),
                          ("values_along_features", "values_along_features")):
        if getattr(settings, name, False):
            features.append((feature, "yes"))
    for name in ("consumer_warpgroups", "tile_scheduler", "staged_output_copy", "mask_by_block", "warpgroups"):
        value = getattr(settings, name, None)
        if value not in (None, ""):
            features.append((name, str(value)))
    return features


def _dtypes(kernel: loop_ir.Kernel) -> str:
    return ",".join(sorted({b.type.dtype.short for b in (*kernel.inputs, *kernel.outputs)}))


def _stage_text(s: tile_ir.SharedStage) -> str:
    layout = f"swizzle {s.swizzle}" if s.swizzle else ("padded" if s.padding else "unpadded")
    return f"{s.copy} {s.copy_bytes} B, {s.buffers} buffers, {layout}"


def _leading_int(text: Any) -> int:
    found = re.match(r"\s*(\d+)", str(text))
    return int(found.group(1)) if found else 1


def _schedule_switches(schedule: str, knobs: dict[str, Any]) -> list[tuple[str, str]]:
    """The switches a schedule records among its Tile IR's knob lines."""
    def present(*names: str) -> list[tuple[str, str]]:
        return [(n, "yes") for n in names if n in knobs]

    if schedule == "contraction":
        return [("fragment_width", str(_leading_int(knobs.get("fragment_width", 1)))),
                ("epilogue_store_width", str(_leading_int(knobs.get("epilogue_stores", 1))))] + present(
            "split_k", "slice_end", "unneeded_product")
    if schedule == "matmul_row_reduction":
        return present("last_block", "unneeded_product", "skipped_elements")
    if schedule == "row_reduction":
        return [("row_in_registers", "yes" if knobs.get("row_in_registers") else "no")] + (
            [("rows_per_block", "several")] if knobs.get("rows_per_block", 1) > 1 else []) + present(
            "prefetch_epilogue_reads", "vector_stores", "masked_loads")
    if schedule in ("pointwise", "unrolled_reduction"):
        switches = [("vectors_per_thread", "several")] if knobs.get("vectors_per_thread", 1) > 1 else []
        switches += [("steps", "several")] if knobs.get("steps", 1) > 1 else []
        if " if " in str(knobs.get("vector_loads", "")):
            switches.append(("guarded_vector_loads", "yes"))
        return switches + present("scalar_loads", "scalar_stores")
    return []


def describe(setting: tuple[tuple[str, str], ...]) -> str:
    """``schedule: name=value, ...``, the way ``--list`` prints a setting."""
    (_, schedule), *rest = setting
    return f"{schedule}: " + ", ".join(f"{k}={v}" if v != "yes" else k for k, v in rest)


# --- the knobs that pin a kernel's chosen setting ------------------------------------------------

_CHOSEN = {
    "block_m": r"block (\d+)x\d+x\d+", "block_n": r"block \d+x(\d+)x\d+", "block_k": r"block \d+x\d+x(\d+)",
    "thread_m": r"thread (\d+)x\d+", "thread_n": r"thread \d+x(\d+)", "in_block_k_splits": r"in-block k-splits (\d+)",
    "buffers": r"buffers (\d+)", "fragment_width": r"fragment width (\d+)", "padding": r"padding (\d+)",
    "copy_steps": r"copies over (\d+) steps", "stages": r"(\d+) stages", "consumer_warpgroups": r"(\d+) consumer warpgroup",
}
_FIXED_BY_THE_ROW = ("block_n", "thread_n", "in_block_k_splits")


def pins_of(tk: tile_ir.TileKernel) -> dict[str, dict[str, Any]]:
    """Knobs, by schedule, that make the same schedule choose ``tk``'s setting again on other sizes."""
    knobs = dict(tk.knobs)
    if tk.schedule in ("contraction", "matmul_row_reduction"):
        chosen = str(knobs.get("chosen", ""))
        pins: dict[str, Any] = {}
        for name, pattern in _CHOSEN.items():
            found = re.search(pattern, chosen)
            if found and not (tk.schedule == "matmul_row_reduction" and name in _FIXED_BY_THE_ROW):
                pins[name] = int(found.group(1))
        pins["products"] = PRODUCTS[tk.settings.products]
        if tk.settings.warp_patch is not None:
            pins["warp_columns"] = tk.settings.warp_patch[1]
        pins["grouped_rows"] = tk.settings.grouped_rows
        if tk.schedule == "contraction":
            pins["split_k"] = _leading_int(knobs["split_k"]) if "split_k" in knobs else 1
        elif tk.reduction is not None and tk.reduction.strategy == "last_block":
            pins["row_combine"] = "last_block"
        return {tk.schedule: pins}
    if tk.schedule == "row_reduction":
        return {tk.schedule: {"threads": knobs["threads"], "rows_per_block": knobs["rows_per_block"],
                              "row_in_registers": bool(knobs["row_in_registers"]),
                              "prefetch_epilogue_reads": "prefetch_epilogue_reads" in knobs,
                              "vector_width": tk.vector_width}}
    if tk.schedule in ("pointwise", "unrolled_reduction"):
        return {tk.schedule: {"threads": tk.grid[0].threads, "vector_width": tk.vector_width,
                              "vectors_per_thread": knobs["vectors_per_thread"], "steps": knobs["steps"]}}
    if tk.schedule == "generic":
        return {tk.schedule: {"threads": tk.threads_per_block}}
    return {}


# --- programs: suite cases and scaled-down models ------------------------------------------------

@attrs.frozen
class SuiteProgram:
    """A kernel-suite case, possibly at other sizes than the suite's, with knobs pinned."""

    case: str
    expression: str
    inputs: tuple[InputSpec, ...]
    knobs: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    @classmethod
    def of(cls, case: Case) -> SuiteProgram:
        return cls(case.name, case.expression, case.inputs)

    @property
    def name(self) -> str:
        return self.case

    def shapes(self) -> str:
        return ", ".join(f"{i.name}={'x'.join(map(str, i.shape))}" for i in self.inputs)

    def pinned(self) -> dict[str, dict[str, Any]]:
        return {schedule: dict(values) for schedule, values in self.knobs}

    def spec(self) -> ProgramSpec:
        return ProgramSpec(self.expression, self.inputs, origin=f"<sanitize {self.case}>")

    def compile(self, device: str = "cpu"):
        spec = self.spec()
        settings = {"knobs": self.pinned()} if self.knobs else {}
        if device == "cpu":
            settings["target"] = TARGET
        return lamina.compile(spec.function(), spec.example_inputs(device=device), **settings)

    def to_json(self) -> dict[str, Any]:
        return {"kind": "suite", "case": self.case, "expression": self.expression,
                "inputs": [f"{i.name}={','.join(map(str, i.shape))}:{str(i.dtype).removeprefix('torch.')}"
                           for i in self.inputs],
                "knobs": self.pinned()}


@attrs.frozen
class ModelProgram:
    """A scaled-down architecture of the model matrix (``tests/models/test_model_matrix.py``),
    batch 2, through ``lamina.compile``."""

    arch: str
    length: int

    @property
    def name(self) -> str:
        return f"model {self.arch} at length {self.length}"

    def shapes(self) -> str:
        return f"{self.arch}, scaled down, batch 2, length {self.length}"

    def build(self, device: str = "cpu"):
        from lamina.models.architectures import ARCHITECTURES, build, example_inputs
        arch = ARCHITECTURES[self.arch]
        model = build(arch, size="small", length=self.length, seed=MODEL_SEED)
        inputs = example_inputs(arch, model, batch=2, length=self.length, seed=MODEL_SEED)
        return model, inputs

    def compile(self, device: str = "cpu"):
        model, inputs = self.build()
        return lamina.compile(model, example_kwargs=inputs, **({"target": TARGET} if device == "cpu" else {}))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "model", "arch": self.arch, "length": self.length}


def program_from_json(data: dict[str, Any]) -> SuiteProgram | ModelProgram:
    if data["kind"] == "model":
        return ModelProgram(data["arch"], data["length"])
    from lamina.program_spec import parse_input
    knobs = tuple((s, tuple(sorted(v.items()))) for s, v in sorted(data["knobs"].items()))
    return SuiteProgram(data["case"], data["expression"], tuple(parse_input(t) for t in data["inputs"]), knobs)


def suite_programs(dtypes: Iterable[str] = ("float32", "bfloat16")) -> list[SuiteProgram]:
    wanted = {getattr(torch, d) for d in dtypes}
    return [SuiteProgram.of(c) for c in builtin_suite() if c.dtype in wanted]


def model_programs() -> list[ModelProgram]:
    from lamina.models.architectures import ARCHITECTURES
    return [ModelProgram(name, length) for name, arch in ARCHITECTURES.items() for length in arch.small_lengths]


# --- compiling programs and finding the representatives ------------------------------------------

def kernel_work(kernel: loop_ir.Kernel) -> int:
    """Iterations of ``kernel``'s loop nests: the innermost statements' runs, summed."""
    def count(body, outer: int) -> int:
        total = 0
        for s in body:
            total += count(s.body, outer * s.extent) if isinstance(s, loop_ir.Loop) else outer
        return total
    return count(kernel.body, 1)


@attrs.frozen
class Compiled:
    """What one program compiles to: each kernel's name, setting and knobs, and the program's work."""

    program: SuiteProgram | ModelProgram
    kernels: tuple[tuple[str, tuple[tuple[str, str], ...], dict[str, dict[str, Any]]], ...]
    work: int


def compile_program(program: SuiteProgram | ModelProgram) -> Compiled:
    compilation = program.compile().compilation
    work = sum(kernel_work(t.kernel) for t in compilation.tiles)
    kernels = tuple((t.kernel.name, setting_of(t), pins_of(t)) for t in compilation.tiles)
    return Compiled(program, kernels, work)


def _compile_or_message(program: SuiteProgram | ModelProgram) -> Compiled | str:
    """The program compiled, or why it did not compile: one failure must not stop the enumeration."""
    try:
        return compile_program(program)
    except Exception as error:
        kind = "" if isinstance(error, LaminaError) else f"{type(error).__name__}: "
        return f"{program.name}: {kind}{str(error).splitlines()[0] if str(error) else ''}"


def _in_processes(function: Callable, arguments: list, jobs: int) -> list:
    """``function`` of each argument, in order, in ``jobs`` processes at once."""
    if jobs <= 1 or len(arguments) <= 1:
        return [function(*a) for a in arguments]
    spawn = multiprocessing.get_context("spawn")  # no fork of a process that has run torch's threads
    with concurrent.futures.ProcessPoolExecutor(min(jobs, len(arguments)), mp_context=spawn) as pool:
        return list(pool.map(function, *zip(*arguments), chunksize=1))


def compile_all(programs: list, jobs: int = 1) -> tuple[list[Compiled], list[str]]:
    """Every program compiled, in order (in ``jobs`` processes at once); and the failures' messages."""
    results = _in_processes(_compile_or_message, [(p,) for p in programs], jobs)
    return [r for r in results if isinstance(r, Compiled)], [r for r in results if isinstance(r, str)]


@attrs.frozen
class Representative:
    id: str
    setting: tuple[tuple[str, str], ...]
    program: SuiteProgram | ModelProgram
    kernel: str
    work: int
    uses: int
    """How many kernels of the compiled programs have this setting."""
    shrunk_from: str | None = None
    """The suite case's own shapes, where the representative runs at smaller ones."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "setting": describe(self.setting), "features": dict(self.setting),
                "program": self.program.to_json(), "case": self.program.name, "kernel": self.kernel,
                "shapes": self.program.shapes(), "shrunk_from": self.shrunk_from, "work": self.work,
                "kernels_with_this_setting": self.uses}


def representative_from_json(data: dict[str, Any]) -> Representative:
    return Representative(data["id"], tuple(data["features"].items()), program_from_json(data["program"]),
                          data["kernel"], data["work"], data["kernels_with_this_setting"], data["shrunk_from"])


def representatives(compiled: list[Compiled], shrink: bool = True, jobs: int = 1) -> list[Representative]:
    """One representative per setting found in ``compiled``: the least work, shrunk where it is large
    (``jobs`` shrinking at once)."""
    found: dict[tuple, list[tuple[int, str, str, Compiled, dict]]] = {}
    for c in compiled:
        for kernel, setting, pins in c.kernels:
            found.setdefault(setting, []).append((c.work, c.program.name, kernel, c, pins))
    chosen = []
    for setting in sorted(found, key=describe):
        uses = len(found[setting])
        work, _, kernel, c, pins = min(found[setting], key=lambda entry: entry[:3])  # ties: by name
        chosen.append((Representative("", setting, c.program, kernel, work, uses), c, pins))
    large = [k for k, (r, c, _) in enumerate(chosen)
             if shrink and r.work > SMALL_WORK and isinstance(c.program, SuiteProgram)]
    shrunk = dict(zip(large, _in_processes(smaller, [chosen[k] for k in large], jobs)))
    chosen = [shrunk.get(k) or r for k, (r, _, _) in enumerate(chosen)]
    counts: dict[str, int] = {}
    numbered = []
    for r in chosen:
        schedule = r.setting[0][1]
        counts[schedule] = counts.get(schedule, 0) + 1
        numbered.append(attrs.evolve(r, id=f"{schedule}-{counts[schedule]}"))
    return numbered


# --- smaller sizes for large suite cases ---------------------------------------------------------

def _resize(inputs: tuple[InputSpec, ...], sizes: dict[str, dict[int, int]]) -> tuple[InputSpec, ...]:
    """``inputs`` with ``sizes[name][axis]`` in place of those axes (negative axes count from the end)."""
    resized = []
    for i in inputs:
        shape = list(i.shape)
        for axis, size in sizes.get(i.name, {}).items():
            shape[axis] = min(shape[axis], size)
        resized.append(attrs.evolve(i, shape=tuple(shape)))
    return tuple(resized)


def _rows(rows: int) -> Callable[[tuple[InputSpec, ...]], tuple[InputSpec, ...]]:
    return lambda inputs: _resize(inputs, {n: {0: rows} for n in ("x", "r", "gate", "up")})


def _rope(rows: int, heads: int):
    return lambda inputs: _resize(inputs, {"q": {1: heads, 2: rows}, "cos": {0: rows}, "sin": {0: rows}})


def _scores(rows: int, keys: int | None = None):
    """One head and fewer query rows; fewer key rows (the length of each softmax row) only where given."""
    return lambda inputs: _resize(inputs, {"q": {1: 1, 2: rows}, "k": {1: 1} | ({2: keys} if keys else {})})


def _linear(rows: int, columns: int, depth: int | None = None):
    """Fewer rows and output columns; a shorter reduction only where given, as split-K depends on it."""
    depth_axis = {1: depth} if depth else {}
    return lambda inputs: _resize(inputs, {"x": {0: rows} | depth_axis, "w": {0: columns} | depth_axis,
                                           "b": {0: columns}})


_LINEAR = (_linear(77, 200, 1024), _linear(77, 200), _linear(200, 520))
_SCORES = (_scores(77, 520), _scores(77), _scores(200))
SHRINK_RULES: dict[str, tuple[Callable, ...]] = {
    "rmsnorm": (_rows(5),), "add_rmsnorm": (_rows(5),), "silu_mul": (_rows(3),), "rope_q": (_rope(5, 2),),
    "scores": _SCORES, "scores_causal": _SCORES,
    "linear_qkv": _LINEAR, "linear_o": _LINEAR, "linear_gate_up": _LINEAR, "linear_down": _LINEAR,
}
"""Smaller sizes to try for each kind of suite case (the part of its name after the model), the
smallest first. Rows and columns are multiples of no tile size, so that partial tiles run."""


def smaller(r: Representative, c: Compiled, pins: dict[str, dict[str, Any]]) -> Representative | None:
    """``r`` at the first smaller size of its case's ``SHRINK_RULES`` where the kernel keeps its
    setting: with the knobs of its setting pinned, else unpinned; None where none keeps it."""
    program = c.program
    kind = program.case.split(".")[1] if program.case.count(".") >= 2 else ""
    position = [name for name, _, _ in c.kernels].index(r.kernel)
    for rule in SHRINK_RULES.get(kind, ()):
        inputs = rule(program.inputs)
        if inputs == program.inputs:
            continue
        for knobs in (pins, {}):
            candidate = SuiteProgram(program.case, program.expression, inputs,
                                     tuple((s, tuple(sorted(v.items()))) for s, v in sorted(knobs.items())))
            result = _compile_or_message(candidate)
            if not isinstance(result, Compiled) or len(result.kernels) != len(c.kernels):
                continue
            name, setting, _ = result.kernels[position]
            if setting == r.setting:
                return attrs.evolve(r, program=candidate, kernel=name, work=result.work, shrunk_from=program.shapes())
    return None


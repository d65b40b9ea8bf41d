"""CUDA C++ -> cubin with NVRTC (through cuda-python), with ptxas's resource report.

NVRTC needs no GPU, so every kernel can be compiled, and its registers and spills
read, on any machine. Results go through the on-disk cubin cache
(``lamina.backends.cuda.cubin_cache``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import attrs

from lamina.backends.cuda import headers
from lamina.backends.cuda.cubin_cache import CubinCache, cache_key
from lamina.core.errors import CompileError, LaminaError

STANDARD_OPTIONS = ("-Xptxas=-v", "--std=c++17", "-default-device")
"""Options every compile gets after ``--gpu-architecture``: the ptxas report is how we read registers."""

DIVISION_OPTIONS = ("--prec-div=false",)
"""fp32 division and reciprocals as the fast approximations ``div.full.f32`` (within 2 ulp)
and ``rcp.approx.f32`` (within 1 ulp), as Triton, and so torch.compile, emits them, rather
than IEEE round-to-nearest, whose sequence checks its operands and branches to a slow path.
On the H200 that sequence made the S = 1 silu(gate) * up, a reciprocal per element, slower
than torch.compile's; with this option it is as fast (``experiments/division/``). Subnormals
are kept.
Options a backend is built with come later and win: ``--prec-div=true`` restores IEEE division."""

INSTALL_NVRTC = "pip install nvidia-cuda-nvrtc cuda-python (nvidia-cuda-nvrtc-cu12 for CUDA 12)"

_ARCH = re.compile(r"sm_\d+[af]?\Z")
_CONTEXT_LINES = 3
_MAX_SHOWN_LOCATIONS = 3


@attrs.frozen
class CompiledKernel:
    """A cubin and what ptxas said about the kernel in it."""

    name: str
    arch: str
    cubin: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    shared_bytes: int
    log: str = attrs.field(repr=False)
    from_cache: bool = False

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


def _nvrtc_module():
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise LaminaError(f"lamina's CUDA backend needs NVRTC through cuda-python, which is not installed: {INSTALL_NVRTC}") from error
    return nvrtc


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); a LaminaError says what to install when it cannot be loaded."""
    nvrtc = _nvrtc_module()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as error:  # noqa: BLE001 - cuda-python raises RuntimeError or OSError when the library is missing
        raise LaminaError(f"lamina could not load NVRTC ({error}): {INSTALL_NVRTC}") from error
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise LaminaError(f"NVRTC does not work here (nvrtcVersion returned {result.name}): {INSTALL_NVRTC}")
    return major, minor


def compile_kernel(source: str, name: str, arch: str = "sm_90", options: tuple[str, ...] = (),
                   cache_dir: Path | None = None) -> CompiledKernel:
    """Compile ``source`` for ``arch`` and report on its ``__global__`` function ``name``.

    Looks in the cubin cache first (under ``cache_dir``, else the configuration's
    ``cache_dir``, ``default_cache_dir``). Raises CompileError when NVRTC rejects the source.
    """
    if not _ARCH.match(arch):
        raise LaminaError(f"cannot compile kernel {name} for {arch!r}: lamina compiles for a real architecture such as sm_90 or sm_80")
    version = nvrtc_version()
    all_options = (f"--gpu-architecture={arch}", *STANDARD_OPTIONS, *DIVISION_OPTIONS, *_version_options(version),
                   *options)
    cache = CubinCache(cache_dir)
    key = cache_key(source, arch, all_options, version)
    cached = cache.get(key)
    fields = _report_fields(cached[1]) if cached is not None else None
    if fields is not None:
        return CompiledKernel(name=name, arch=arch, cubin=cached[0], from_cache=True, **fields)
    includes = headers.include_options(tuple(re.findall(r"^#include <([^>]+)>", source, re.MULTILINE)), name)
    cubin, log = _compile(source, name, arch, all_options + includes)
    report = parse_ptxas_report(log, name)
    cache.put(key, cubin, report)
    return CompiledKernel(name=name, arch=arch, cubin=cubin, from_cache=False, **report)


def _version_options(version: tuple[int, int]) -> tuple[str, ...]:
    """From 12.9 NVRTC keeps its own cache of cubins, and a cubin from there comes without
    ptxas's report; lamina's cache makes it redundant, so it is turned off."""
    return ("--no-cache",) if version >= (12, 9) else ()


def _report_fields(report: dict) -> dict | None:
    fields = ("registers", "spill_stores", "spill_loads", "stack_bytes", "shared_bytes")
    if not all(isinstance(report.get(f), int) for f in fields) or not isinstance(report.get("log"), str):
        return None
    return {f: report[f] for f in fields + ("log",)}


def _compile(source: str, name: str, arch: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    nvrtc = _nvrtc_module()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    if result != ok:
        raise CompileError(f"NVRTC could not take the source of kernel {name} (nvrtcCreateProgram returned {result.name})")
    try:
        encoded = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        log = _program_log(nvrtc, program)
        if result != ok:
            raise CompileError(describe_failure(name, arch, source, log, result.name))
        result, size = nvrtc.nvrtcGetCUBINSize(program)
        cubin = b" " * size
        if result == ok and size:
            (result,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        if result != ok or not size:
            raise CompileError(f"NVRTC compiled kernel {name} for {arch} but returned no cubin ({result.name})")
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _program_log(nvrtc, program) -> str:
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\x00").decode(errors="replace")


_ERROR_LINE = re.compile(r"^.*\((\d+)\): (?:catastrophic )?error\b.*$", re.MULTILINE)


def describe_failure(name: str, arch: str, source: str, log: str, result: str) -> str:
    """A compile error for people: NVRTC's error lines, then the failing source lines in context."""
    errors = [m.group(0).strip() for m in _ERROR_LINE.finditer(log)]
    lines = [f"NVRTC could not compile kernel {name} for {arch} ({result}):"]
    lines += [f"  {e}" for e in errors] if errors else [f"  {line}" for line in log.strip().splitlines()]
    source_lines = source.splitlines()
    numbers = list(dict.fromkeys(int(m.group(1)) for m in _ERROR_LINE.finditer(log)))
    for number in numbers[:_MAX_SHOWN_LOCATIONS]:
        if not 1 <= number <= len(source_lines):
            continue
        lines += ["", f"{name}.cu, line {number}:"]
        first, last = max(1, number - _CONTEXT_LINES), min(len(source_lines), number + _CONTEXT_LINES)
        width = len(str(last))
        for n in range(first, last + 1):
            marker = ">" if n == number else " "
            lines.append(f"  {marker} {n:>{width}} | {source_lines[n - 1]}")
    if "cannot open source file" in log:
        lines += ["", f"NVRTC could not find a header: {headers.INSTALL_HINT}."]
    else:
        lines += ["", "lamina printed this source from Kernel IR: the schedule or kernel pass that produced "
                      "the kernel wrote something the CUDA backend cannot express; please report it with the source above."]
    return "\n".join(lines)


def parse_ptxas_report(log: str, name: str) -> dict:
    """Registers, spills, stack and static shared memory of kernel ``name``, from ptxas's ``-v`` report."""
    section = log
    start = log.find(f"Compiling entry function '{name}'")
    if start >= 0:
        section = log[start:]
        end = section.find("Compiling entry function", 1)
        section = section if end < 0 else section[:end]

    def number(pattern: str) -> int:
        found = re.search(pattern, section)
        return int(found.group(1)) if found else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "spill_stores": number(r"(\d+) bytes spill stores"),
        "spill_loads": number(r"(\d+) bytes spill loads"),
        "stack_bytes": number(r"(\d+) bytes stack frame"),
        "shared_bytes": number(r"(\d+) bytes smem"),
        "log": log,
    }


def assert_no_spills(compiled: CompiledKernel) -> None:
    """Raise if ptxas had to spill registers of the kernel to local memory."""
    if compiled.spills:
        raise LaminaError(
            f"kernel {compiled.name} spills registers on {compiled.arch}: {compiled.spill_stores} bytes stored and "
            f"{compiled.spill_loads} bytes loaded from local memory, with {compiled.registers} registers per thread. "
            "Use a smaller per-thread tile or fewer threads per block in its schedule."
        )

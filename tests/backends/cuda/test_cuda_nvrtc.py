"""NVRTC: compile errors for people, the ptxas report, and NVRTC's absence."""

from __future__ import annotations

import re
import sys

import pytest

from lamina.backends.cuda import CompiledKernel, assert_no_spills, compile_kernel, emit_cuda, kernel_symbol
from lamina.backends.cuda import headers, nvrtc
from lamina.core.errors import CompileError, LaminaError
from tests.backends.cuda import kernels


def test_a_source_that_does_not_compile_names_the_kernel_and_shows_the_failing_line(tmp_path):
    kernel = kernels.tiled_matmul(37, 29, 45)
    good_line = "acc[i][j] + static_cast<float>(bias[col0 + j]);"
    source = emit_cuda(kernel).replace(good_line, "acc[i][j] + static_cast<float>(undefined_bias[col0 + j]);")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "undefined_bias" in text)
    with pytest.raises(CompileError) as caught:
        compile_kernel(source, kernel_symbol(kernel), cache_dir=tmp_path)
    message = str(caught.value)
    assert message.startswith("NVRTC could not compile kernel tiled_matmul for sm_90")
    assert f'tiled_matmul.cu({line}): error: identifier "undefined_bias" is undefined' in message
    assert f"  > {line} |         c[row0 * 29 + i * 29 + col0 + j] = acc[i][j] + static_cast<float>(undefined_bias" in message
    assert f"    {line - 1} |       if (row0 + i < 37 && col0 + j < 29) {{" in message
    assert f"    {line + 1} |       }}" in message
    assert not list(tmp_path.rglob("*.cubin"))


def test_only_real_architectures_are_accepted(tmp_path):
    with pytest.raises(LaminaError, match="such as sm_90"):
        compile_kernel(emit_cuda(kernels.elementwise(10)), "elementwise", arch="compute_90", cache_dir=tmp_path)


def test_an_older_architecture_compiles(tmp_path):
    kernel = kernels.tiled_matmul(20, 20, 20)
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), arch="sm_80", cache_dir=tmp_path)
    assert compiled.arch == "sm_80" and compiled.registers > 0


def test_the_report_is_there_when_nvrtc_compiled_the_source_before(tmp_path):
    kernel = kernels.elementwise(321)
    first, second = (compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), cache_dir=tmp_path / d) for d in "ab")
    assert not second.from_cache
    assert first.registers == second.registers > 0
    assert "Used" in second.log


PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'other' for 'sm_90'
ptxas info    : Function properties for other
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers
ptxas info    : Compiling entry function 'wanted' for 'sm_90'
ptxas info    : Function properties for wanted
ptxas         .     16 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2176 bytes smem
"""


def test_the_ptxas_report_is_read_for_the_named_kernel():
    report = nvrtc.parse_ptxas_report(PTXAS_LOG, "wanted")
    assert {k: v for k, v in report.items() if k != "log"} == {
        "registers": 40, "spill_stores": 12, "spill_loads": 20, "stack_bytes": 16, "shared_bytes": 2176,
    }


def compiled(spill_stores=0, spill_loads=0):
    return CompiledKernel(name="busy", arch="sm_90", cubin=b"\x7fELF", registers=255, spill_stores=spill_stores,
                          spill_loads=spill_loads, stack_bytes=spill_stores, shared_bytes=0, log="")


def test_assert_no_spills():
    assert_no_spills(compiled())
    with pytest.raises(LaminaError, match="kernel busy spills registers on sm_90: 8 bytes stored and 4 bytes loaded"):
        assert_no_spills(compiled(8, 4))


def test_missing_nvrtc_says_what_to_install(monkeypatch, tmp_path):
    import cuda.bindings

    monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    nvrtc.nvrtc_version.cache_clear()
    try:
        with pytest.raises(LaminaError, match="pip install nvidia-cuda-nvrtc"):
            compile_kernel(emit_cuda(kernels.elementwise(10)), "elementwise", cache_dir=tmp_path)
    finally:
        nvrtc.nvrtc_version.cache_clear()


def test_missing_half_precision_headers_say_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(headers, "candidate_dirs", lambda: [])
    headers.include_dirs.cache_clear()
    kernel = kernels.elementwise(10, dtype=kernels.dtypes.bfloat16)
    try:
        with pytest.raises(LaminaError, match=r"kernel elementwise includes cuda_bf16\.h.*pip install nvidia-cuda-runtime"):
            compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), cache_dir=tmp_path)
    finally:
        headers.include_dirs.cache_clear()


def _ptx_instructions(source: str, options: tuple[str, ...]) -> set[str]:
    """The division and reciprocal instructions NVRTC writes for ``source`` under ``options``."""
    from cuda.bindings import nvrtc as bindings

    _, program = bindings.nvrtcCreateProgram(source.encode(), b"division.cu", 0, [], [])
    all_options = ("--gpu-architecture=compute_90", *nvrtc.STANDARD_OPTIONS[1:], *options)
    (result,) = bindings.nvrtcCompileProgram(program, len(all_options), [o.encode() for o in all_options])
    assert result == bindings.nvrtcResult.NVRTC_SUCCESS
    _, size = bindings.nvrtcGetPTXSize(program)
    ptx = b" " * size
    bindings.nvrtcGetPTX(program, ptx)
    return set(re.findall(r"\b(div\.[a-z]+\.f32|rcp\.[a-z]+\.f32)", ptx.decode()))


DIVIDING_KERNEL = """extern "C" __global__ void divide(float* a, const float* b) {
  int i = threadIdx.x;
  a[i] = a[i] / b[i] + 1.0f / (1.0f + expf(-b[i]));
}"""


def test_kernels_divide_as_torch_compile_does_and_a_later_option_restores_ieee_division():
    assert _ptx_instructions(DIVIDING_KERNEL, nvrtc.DIVISION_OPTIONS) == {"div.full.f32", "rcp.approx.f32"}
    restored = _ptx_instructions(DIVIDING_KERNEL, (*nvrtc.DIVISION_OPTIONS, "--prec-div=true"))
    assert restored == {"div.rn.f32", "rcp.rn.f32"}

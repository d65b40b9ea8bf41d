"""Each kernel launched to overlap the previous one (on Hopper), waiting for it first."""

from __future__ import annotations

import attrs
import pytest
import torch

import lamina
from lamina.backends.cuda import CudaBackend, compile_kernel, emit_cuda, kernel_symbol
from lamina.backends.cuda.plugin import SM80, SM90
from lamina.core.errors import LaminaError, VerificationError
from lamina.core.ir import kernel_ir as kir
from lamina.plugins.kernel_passes import OverlapWithPreviousKernel
from tests.backends.cuda import kernels

OVERLAP = OverlapWithPreviousKernel()

OVERLAPPING_ELEMENTWISE = """\
kernel elementwise  grid (3, 1, 1)  block (128, 1, 1)  overlapping the previous kernel
  param in x: f32[300]
  param in w: f32[300]
  param out y: f32[300]
  wait for the previous kernel
  let the next kernel launch
  var i: i64 = blockIdx.x * 128 + threadIdx.x
  if i < 300:
    y[i] = where(x[i] > 0.0, x[i] * w[i] + 0.5, sigmoid(x[i])) * exp(-abs(w[i]))"""


def test_on_hopper_a_kernel_waits_for_the_previous_first_and_then_lets_the_next_launch():
    kernel = OVERLAP.apply(kernels.elementwise(300), SM90)
    assert kir.format_kernel(kernel) == OVERLAPPING_ELEMENTWISE
    kir.verify_kernel(kernel)


def test_before_hopper_kernels_launch_after_the_previous_one():
    kernel = kernels.elementwise(300)
    assert OVERLAP.apply(kernel, SM80) == kernel


def test_the_pass_waits_once_however_often_it_runs():
    once = OVERLAP.apply(kernels.elementwise(300), SM90)
    assert OVERLAP.apply(once, SM90) == once


def _without_wait(kernel):
    return attrs.evolve(kernel, body=tuple(s for s in kernel.body if not isinstance(s, kir.WaitForPreviousKernel)))


def _wait_after_the_first_statement(kernel):
    wait, trigger, first, *rest = kernel.body
    return attrs.evolve(kernel, body=(trigger, first, wait, *rest))


def _wait_without_overlap(kernel):
    return attrs.evolve(kernel, launch=attrs.evolve(kernel.launch, overlaps_previous_kernel=False))


@pytest.mark.parametrize("change, problem", [
    (_without_wait, "its body must start by waiting for that kernel"),
    (_wait_after_the_first_statement, "its body must start by waiting for that kernel"),
    (_wait_without_overlap, "it waits for the previous kernel, but its launch does not overlap"),
])
def test_the_verifier_checks_that_an_overlapping_kernel_waits_first(change, problem):
    with pytest.raises(VerificationError, match=problem):
        kir.verify_kernel(change(OVERLAP.apply(kernels.elementwise(300), SM90)))


def test_comments_may_come_before_the_wait():
    kernel = OVERLAP.apply(kernels.elementwise(300), SM90)
    kir.verify_kernel(attrs.evolve(kernel, body=(kir.Comment("from a plugin"), *kernel.body)))


def rmsnorm_then_scores(x, w):
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    return torch.softmax(y @ y.transpose(0, 1), -1)


def test_compiled_programs_overlap_every_kernel_and_match_eager():
    inputs = (torch.randn(37, 70), torch.randn(70))
    compiled = lamina.compile(rmsnorm_then_scores, inputs)
    program = compiled.compilation.kernels
    assert len(program.kernels) > 1
    assert all(k.launch.overlaps_previous_kernel for k in program.kernels)
    torch.testing.assert_close(compiled(*inputs), rmsnorm_then_scores(*inputs), rtol=1e-5, atol=1e-5)


def test_disabling_the_plugin_launches_each_kernel_after_the_previous_one():
    inputs = (torch.randn(37, 70), torch.randn(70))
    compiled = lamina.compile(rmsnorm_then_scores, inputs, disable=("lamina.builtin.kernel_passes",))
    kernel_ir = compiled.ir("kernel")
    assert "overlapping" not in kernel_ir and "wait for the previous kernel" not in kernel_ir
    torch.testing.assert_close(compiled(*inputs), rmsnorm_then_scores(*inputs), rtol=1e-5, atol=1e-5)


def test_the_cuda_source_waits_before_its_first_statement_and_compiles(tmp_path):
    kernel = OVERLAP.apply(kernels.elementwise(300), SM90)
    source = emit_cuda(kernel)
    assert "overlapping the previous kernel" in source.splitlines()[0]
    body = source.split("{\n", 1)[1].splitlines()
    assert body[:2] == ['  asm volatile("griddepcontrol.wait;\\n" ::: "memory");',
                        '  asm volatile("griddepcontrol.launch_dependents;\\n");']
    compiled = compile_kernel(source, kernel_symbol(kernel), "sm_90", cache_dir=tmp_path)
    assert not compiled.spills


def test_an_overlapping_kernel_is_not_compiled_for_gpus_before_hopper(tmp_path):
    program = kir.Program([OVERLAP.apply(kernels.elementwise(300), SM90)])
    with pytest.raises(LaminaError, match="only GPUs from Hopper .sm_90. on can do, so it cannot be compiled for sm_80"):
        CudaBackend(cache_dir=tmp_path).compile(program, "sm_80")

"""The reference backend starts every buffer a program writes as NaN, so that an element no
kernel wrote cannot pass for a computed one."""

import torch

import lamina
from lamina.backends.cuda.targets import SM90
from lamina.backends.reference.backend import ReferenceBackend
from lamina.runtime.program_runner import ProgramRunner


def scaled_row_sums(x):
    return (x * 2).sum(-1)


def test_buffers_written_by_a_program_start_as_nan_until_a_kernel_writes_them():
    x = torch.randn(5, 7)
    compilation = lamina.compile(scaled_row_sums, (x,)).compilation
    runner = ReferenceBackend().load(compilation, SM90)
    assert runner.poison
    idle = ProgramRunner(compilation.loop, compilation.kernels, lambda kernel, buffers, sizes: None, torch.device("cpu"),
                         poison=True)
    (untouched,) = idle(x)
    assert untouched.isnan().all()
    (result,) = runner(x)
    torch.testing.assert_close(result, scaled_row_sums(x))

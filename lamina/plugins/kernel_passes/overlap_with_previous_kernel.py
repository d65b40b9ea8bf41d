"""Each kernel launched while the kernel before it on the stream finishes.

Between two kernels on a stream the GPU is otherwise idle for a while: the next kernel is
launched, its blocks are scheduled and start, and only then do their first loads go out.
On Hopper a kernel launched as a programmatic dependent of the previous one may launch as
soon as every block of that one has let it (``LetNextKernelLaunch``); its blocks take the SMs
that the previous kernel's last blocks leave, and wait (``WaitForPreviousKernel``) until that
kernel has finished and its stores are visible before touching memory. The wait comes first,
so a kernel never reads what the previous one has yet to write, or writes what it has yet to
read, whatever that kernel is. Each block lets the next kernel launch right after its wait,
not before: letting it launch first lets a chain of short kernels launch one after another,
all but one holding SMs while they wait, which made the attention scores at S = 128 slower
than without any overlap.

On the H200 this took nearly a third off the suite's kernels of one token, and brought the RMSNorm
and RoPE kernels at S = 2048 a few percent closer to the copy ceiling, cold
(``experiments/dependent_launch/``). Disable the plugin
``lamina.builtin.kernel_passes`` to launch every kernel after the previous one has finished.
"""

from __future__ import annotations

import attrs

from lamina.core.ir import kernel_ir
from lamina.core.target import Target

class OverlapWithPreviousKernel:
    name = "overlap_with_previous_kernel"
    priority = -100
    """Last, so that the wait comes before whatever other passes add to the kernel."""

    def apply(self, kernel: kernel_ir.Kernel, target: Target) -> kernel_ir.Kernel:
        too_old = target.compute_capability < kernel_ir.OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY
        if too_old or kernel.launch.overlaps_previous_kernel:
            return kernel
        return attrs.evolve(kernel, launch=attrs.evolve(kernel.launch, overlaps_previous_kernel=True),
                            body=(kernel_ir.WaitForPreviousKernel(), kernel_ir.LetNextKernelLaunch(), *kernel.body))

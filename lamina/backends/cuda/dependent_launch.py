"""A kernel launched while the kernel before it on the stream finishes (Hopper's programmatic
dependent launch): the PTX of ``LetNextKernelLaunch`` and ``WaitForPreviousKernel``, the GPUs
that have them, and the launch attribute that asks the driver for the overlap.

The attribute alone changes nothing for a kernel that does not wait: it is the wait, first in
the kernel, that makes the overlap safe, and ``kernel_ir.verify_kernel`` checks it is there.
"""

from __future__ import annotations

from lamina.core.errors import LaminaError
from lamina.core.ir import kernel_ir as kir

LET_NEXT_KERNEL_LAUNCH = 'asm volatile("griddepcontrol.launch_dependents;\\n");'
WAIT_FOR_PREVIOUS_KERNEL = 'asm volatile("griddepcontrol.wait;\\n" ::: "memory");'


def check_arch(kernel: kir.Kernel, arch: str) -> None:
    """Refuse to compile a kernel whose launch overlaps the previous kernel's for a GPU older than Hopper."""
    capability = int("".join(ch for ch in arch if ch.isdigit()) or 0)
    if kernel.launch.overlaps_previous_kernel and capability < kir.OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY:
        raise LaminaError(
            f"kernel {kernel.name} was compiled to launch while the previous kernel finishes (griddepcontrol), which "
            f"only GPUs from Hopper (sm_90) on can do, so it cannot be compiled for {arch}; compile for the GPU's own "
            f"target (LAMINA_TARGET={arch}), or disable the plugin lamina.builtin.kernel_passes"
        )


def launch_config(driver, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int):
    """The ``CUlaunchConfig`` of a kernel that may overlap the previous one, but for its stream (``hStream``)."""
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.attrs = [attribute]
    config.numAttrs = 1
    return config

"""The built-in Kernel IR passes."""

from lamina.plugins.kernel_passes.overlap_with_previous_kernel import OverlapWithPreviousKernel

__all__ = ["OverlapWithPreviousKernel"]

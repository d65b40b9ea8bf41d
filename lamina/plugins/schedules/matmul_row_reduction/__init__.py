"""Row reductions over a contraction's rows in one kernel: ``softmax(q @ k^T * scale)``.

A block computes whole rows of the product (a warp's 32 lanes span a row), keeps them in
registers, reduces them with warp shuffles and writes only the reduced result, so the
unnormalised product never reaches memory.
"""

from lamina.plugins.schedules.matmul_row_reduction.fuse_contraction_into_row_reduction import computed_where_read

__all__ = ["computed_where_read"]

"""Float32 products on the tensor cores through warp-wide ``mma.sync``, each operand as two
tf32 pieces (``products`` says when and why, ``steps`` writes a k-tile's steps)."""

from lamina.plugins.schedules.contraction.mma_sync.products import COLUMN_RUN, PATCH_COLUMNS, PATCH_ROWS, factors
from lamina.plugins.schedules.contraction.mma_sync.steps import TensorCoreSteps

__all__ = ["COLUMN_RUN", "PATCH_COLUMNS", "PATCH_ROWS", "TensorCoreSteps", "factors"]

"""The threads of a launch, laid out as one flat axis, and the mask of those running.

The simulator runs every thread of every block at once: thread ``g`` of the grid is
thread ``g % threads_per_block`` (linear id ``x + y*bx + z*bx*by``) of block
``g // threads_per_block`` (linear id of the block in the grid, x fastest). A cluster is
``launch.cluster[0]`` blocks adjacent along x.
"""

from __future__ import annotations

import torch

from lamina.core.errors import SimulationError
from lamina.core.ir import kernel_ir

WARP_SIZE = 32


class ThreadGrid:
    """Per-thread coordinates of a launch, as int64 tensors of shape [total]."""

    def __init__(self, kernel: kernel_ir.Kernel):
        launch = kernel.launch
        for what, dims in (("grid", launch.grid), ("block", launch.block)):
            if len(dims) != 3 or any(int(n) < 1 for n in dims):
                raise SimulationError(
                    f"kernel {kernel.name}: launch {what} {tuple(dims)} must be three positive sizes")
        self.block_dims = tuple(int(n) for n in launch.block)
        self.grid_dims = tuple(int(n) for n in launch.grid)
        self.threads_per_block = self.block_dims[0] * self.block_dims[1] * self.block_dims[2]
        self.blocks = self.grid_dims[0] * self.grid_dims[1] * self.grid_dims[2]
        self.total = self.blocks * self.threads_per_block
        self.warps_per_block = -(-self.threads_per_block // WARP_SIZE)

        ids = torch.arange(self.total)
        self.thread_ids = ids
        self.block_id = torch.div(ids, self.threads_per_block, rounding_mode="floor")
        self.local_id = ids - self.block_id * self.threads_per_block
        self.warp_id = self.block_id * self.warps_per_block + (self.local_id >> 5)
        self.lane = self.local_id & (WARP_SIZE - 1)
        self._specials = {
            **_coordinates("threadIdx", self.local_id, self.block_dims),
            **_coordinates("blockIdx", self.block_id, self.grid_dims),
        }
        self.cluster_blocks = int(launch.cluster[0])
        self.cluster_rank = self.block_id % self.grid_dims[0] % self.cluster_blocks
        """Per thread: the rank of its block in its cluster (``blockIdx.x`` modulo the cluster's blocks)."""
        self.cluster_first_block = self.block_id - self.cluster_rank

    def special(self, kind: str, axis: str) -> torch.Tensor:
        return self._specials[(kind, axis)]

    def rank_of(self, block: int) -> int:
        """The rank of ``block`` in its cluster."""
        return block % self.grid_dims[0] % self.cluster_blocks

    def describe_block(self, block: int) -> str:
        return f"block {_unravel(block, self.grid_dims)}"

    def describe_local(self, local: int) -> str:
        return f"thread {_unravel(local, self.block_dims)}"

    def describe_thread(self, thread: int) -> str:
        block, local = divmod(thread, self.threads_per_block)
        return f"{self.describe_block(block)} {self.describe_local(local)}"


def _coordinates(kind: str, linear: torch.Tensor, dims: tuple[int, int, int]) -> dict:
    """x, y, z of ``linear`` ids in a box of ``dims``; an axis of extent 1 is a uniform zero."""
    x_extent, y_extent, z_extent = dims
    zero = torch.tensor(0)
    x = linear % x_extent if x_extent > 1 else zero
    rest = torch.div(linear, x_extent, rounding_mode="floor") if x_extent > 1 else linear
    y = rest % y_extent if y_extent > 1 else zero
    z = torch.div(rest, y_extent, rounding_mode="floor") if z_extent > 1 else zero
    return {(kind, "x"): x, (kind, "y"): y, (kind, "z"): z}


def _unravel(linear: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    x = linear % dims[0]
    y = (linear // dims[0]) % dims[1]
    z = linear // (dims[0] * dims[1])
    return (x, y, z)


class Mask:
    """Which threads run the statement at hand; ``full`` is a promise that all of them do."""

    __slots__ = ("active", "full")

    def __init__(self, active: torch.Tensor, full: bool = False):
        self.active = active
        self.full = full

    @classmethod
    def everyone(cls, total: int) -> "Mask":
        return cls(torch.ones(total, dtype=torch.bool), True)

    def narrow(self, cond: torch.Tensor) -> "Mask":
        """The threads of this mask where ``cond`` (0-d or per thread) holds."""
        if cond.dim() == 0:
            return self if bool(cond) else Mask(torch.zeros_like(self.active))
        return Mask(self.active & cond)

    def any(self) -> bool:
        return self.full or bool(self.active.any())

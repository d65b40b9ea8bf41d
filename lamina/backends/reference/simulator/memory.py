"""Global parameters and register arrays of a simulated launch, with bounds checking.

Every access takes per-dimension indices (0-d tensors when uniform, else one per thread)
and the mask of running threads. An access out of bounds by a running thread is a fault:
it is recorded and masked off, and a masked-off or idle thread's load gives zero.
"""

from __future__ import annotations

import torch

from lamina.backends.reference.scalar_ops import as_tensor, torch_dtype
from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.backends.reference.simulator.report import OUT_OF_BOUNDS, FaultLog
from lamina.core.ir import kernel_ir


def out_of_bounds(indices: list[torch.Tensor], shape: tuple[int, ...], mask: Mask, width: int = 1) -> torch.Tensor | None:
    """Per thread, whether a running thread indexes outside ``shape`` (the last index
    covering ``width`` consecutive elements); None when none can."""
    bad = None
    last = len(shape) - 1
    for axis, (value, extent) in enumerate(zip(indices, shape)):
        limit = extent - (width - 1 if axis == last else 0)
        if value.dim() == 0:
            if 0 <= int(value) < limit:
                continue
            flag = mask.active
        else:
            if mask.full:
                low, high = torch.aminmax(value)
                if int(low) >= 0 and int(high) < limit:
                    continue
            flag = ((value < 0) | (value >= limit)) & mask.active
        bad = flag if bad is None else bad | flag
    return bad


def linear_index(indices: list[torch.Tensor], shape: tuple[int, ...]) -> torch.Tensor:
    """Row-major offset of ``indices`` in an array of ``shape`` (uniform if every index is)."""
    flat = None
    stride = 1
    for value, extent in zip(reversed(indices), reversed(shape)):
        value = as_index(value)
        term = value if stride == 1 else value * stride
        flat = term if flat is None else flat + term
        stride *= extent
    return flat


def as_index(value: torch.Tensor) -> torch.Tensor:
    return value if value.dtype == torch.int64 else value.to(torch.int64)


def format_index(indices: list[torch.Tensor], thread: int) -> str:
    return "".join(f"[{int(v if v.dim() == 0 else v[thread])}]" for v in indices)


def per_thread(value: torch.Tensor, total: int) -> torch.Tensor:
    return value.expand(total) if value.dim() == 0 else value


class GlobalArray:
    """A kernel parameter: a flat tensor, read and (if writable) updated in place."""

    def __init__(self, param: kernel_ir.Param, data: torch.Tensor, grid: ThreadGrid, faults: FaultLog):
        self.name = param.name
        self.dtype = param.dtype
        self.writable = param.writable
        self.data = data
        self.numel = data.numel()
        self.shape = (self.numel,)
        self.grid = grid
        self.faults = faults

    def read(self, indices: list[torch.Tensor], mask: Mask, site: int, width: int = 1,
             verb: str = "load from") -> torch.Tensor:
        """Elements at ``indices[0]`` (``width`` consecutive ones per thread when width > 1)."""
        offset = as_index(indices[0])
        if width == 1 and offset.dim() == 0 and 0 <= int(offset) < self.numel:
            return self.data[int(offset)].clone()
        total = self.grid.total
        offset = per_thread(offset, total)
        valid = self.valid(offset, mask, site, width, verb)
        if self.numel == 0:
            shape = (total,) if width == 1 else (total, width)
            return torch.zeros(shape, dtype=self.data.dtype)
        if width > 1:
            offset = (offset.unsqueeze(1) + torch.arange(width)).reshape(-1)
            lanes = valid.active.unsqueeze(1).expand(-1, width).reshape(-1)
        else:
            lanes = valid.active
        if not valid.full:
            offset = torch.where(lanes, offset, 0)
        values = self.data.index_select(0, offset)
        if not valid.full:
            values = torch.where(lanes, values, torch.zeros((), dtype=values.dtype))
        return values if width == 1 else values.view(total, width)

    def write(self, indices: list[torch.Tensor], value: torch.Tensor, mask: Mask, site: int) -> None:
        total = self.grid.total
        offset = per_thread(as_index(indices[0]), total)
        value = per_thread(as_tensor(value, self.dtype), total)
        valid = self.valid(offset, mask, site, 1, "store to")
        if not valid.full:
            lanes = valid.active.nonzero().squeeze(1)
            offset = offset.index_select(0, lanes)
            value = value.index_select(0, lanes)
        if offset.numel():
            self.data.index_copy_(0, offset, value.contiguous())

    def valid(self, offset: torch.Tensor, mask: Mask, site: int, width: int = 1, verb: str = "load from") -> Mask:
        """``mask`` less the threads whose access at ``offset`` falls outside the array, each a fault."""
        bad = out_of_bounds([offset], (self.numel,), mask, width)
        if bad is None:
            return mask
        span = "" if width == 1 else f" ({width} elements)"

        def describe(thread: int) -> str:
            return (f"{verb} {self.name} at offset {int(offset[thread])}{span}, outside [0, {self.numel}), "
                    f"by {self.grid.describe_thread(thread)}")

        if not self.faults.add(OUT_OF_BOUNDS, (site,), bad, describe):
            return mask
        return Mask(mask.active & ~bad)


class RegisterArray:
    """A per-thread array, stored as [threads, elements]. On the accumulators or registers of A of
    a wgmma, which runs asynchronously, ``watch(array, flat, valid, site, verb)`` hears of every
    access but the wgmma's own (``watched=False``)."""

    def __init__(self, array: kernel_ir.Array, grid: ThreadGrid, faults: FaultLog):
        self.name = array.name
        self.dtype = array.dtype
        self.shape = tuple(array.shape)
        self.numel = 1
        for extent in self.shape:
            self.numel *= extent
        self.data = torch.zeros((grid.total, self.numel), dtype=torch_dtype(array.dtype))
        self.grid = grid
        self.faults = faults
        self.watch = None

    def read(self, indices: list[torch.Tensor], mask: Mask, site: int, watched: bool = True) -> torch.Tensor:
        valid = self._valid(indices, mask, site, "load from")
        flat = linear_index(indices, self.shape)
        if watched and self.watch is not None:
            self.watch(self, flat, valid, site, "load from")
        if flat.dim() == 0 and valid.full:
            return self.data[:, int(flat)].clone()
        flat = per_thread(flat, self.grid.total)
        if not valid.full:
            flat = torch.where(valid.active, flat, 0)
        values = self.data.view(-1).index_select(0, self.grid.thread_ids * self.numel + flat)
        if not valid.full:
            values = torch.where(valid.active, values, torch.zeros((), dtype=values.dtype))
        return values

    def write(self, indices: list[torch.Tensor], value: torch.Tensor, mask: Mask, site: int,
              watched: bool = True) -> None:
        valid = self._valid(indices, mask, site, "store to")
        flat = linear_index(indices, self.shape)
        if watched and self.watch is not None:
            self.watch(self, flat, valid, site, "store to")
        value = as_tensor(value, self.dtype)
        if flat.dim() == 0:
            if not 0 <= int(flat) < self.numel:
                return
            column = self.data[:, int(flat)]
            column.copy_(value if valid.full else torch.where(valid.active, value, column))
            return
        total = self.grid.total
        place = self.grid.thread_ids * self.numel + flat
        value = per_thread(value, total)
        if not valid.full:
            lanes = valid.active.nonzero().squeeze(1)
            place = place.index_select(0, lanes)
            value = value.index_select(0, lanes)
        self.data.view(-1).index_copy_(0, place, value.contiguous())

    def _valid(self, indices: list[torch.Tensor], mask: Mask, site: int, verb: str) -> Mask:
        bad = out_of_bounds(indices, self.shape, mask)
        if bad is None:
            return mask
        shape = "".join(f"[{n}]" for n in self.shape)

        def describe(thread: int) -> str:
            return (f"{verb} register array {self.name} at {format_index(indices, thread)}, outside {shape}, "
                    f"by {self.grid.describe_thread(thread)}")

        if not self.faults.add(OUT_OF_BOUNDS, (site,), bad, describe):
            return mask
        return Mask(mask.active & ~bad)

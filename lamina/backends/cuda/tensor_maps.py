"""Tensor maps (``TensorMap``) encoded for a launch: ``cuTensorMapEncodeTiled`` on the host.

A tensor map holds the global address of its tensor, so it is encoded for the buffer a launch
passes, once per address (and per call's sizes, where its shape holds sizes known only at run
time): a program's buffers keep their addresses from one run to the next (and a CUDA graph
replays the same ones), so the encoded maps are kept with the kernel and a launch only looks
them up. Each is 128 bytes that the launch passes by value
(``hopper_copies.TENSOR_MAP_TYPE``). Elements outside the tensor read as zeros
(``CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE``), boxes land in the 128-byte swizzle or none, and L2
fetches 256 bytes at a time, as CUTLASS asks for GEMM operands.
"""

from __future__ import annotations

import ctypes
from typing import Mapping

import torch

from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.sizes import evaluate_shape, is_symbolic

_MAX_KEPT = 64
"""Encoded maps kept per kernel: more addresses than that means buffers that move every run."""


def _data_type(driver, dtype: dtypes.DType):
    kinds = driver.CUtensorMapDataType
    return {
        dtypes.float32: kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, dtypes.float16: kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        dtypes.bfloat16: kinds.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, dtypes.float64: kinds.CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
        dtypes.int32: kinds.CU_TENSOR_MAP_DATA_TYPE_INT32, dtypes.int64: kinds.CU_TENSOR_MAP_DATA_TYPE_INT64,
        dtypes.uint8: kinds.CU_TENSOR_MAP_DATA_TYPE_UINT8,
    }[dtype]


def encode(tensor_map: kir.TensorMap, dtype: dtypes.DType, address: int, kernel: str,
           shape: tuple[int, int]) -> ctypes.Array:
    """The 128 bytes of ``tensor_map`` over the tensor at ``address``, ``shape`` its rows and columns
    at the call's sizes."""
    from lamina.backends.cuda.driver import _driver, check

    if address % kir.GLOBAL_ALIGNMENT:
        raise LaminaError(f"kernel {kernel} copies {tensor_map.param} with the TMA, which needs its start "
                          f"{kir.GLOBAL_ALIGNMENT}-byte aligned, but the tensor starts at {address:#x}: pass a "
                          "tensor that owns its storage")
    driver = _driver()
    rows, columns = shape
    swizzle = (driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if tensor_map.swizzle
               else driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE)
    sizes, counts = driver.cuuint64_t, driver.cuuint32_t
    result, encoded = driver.cuTensorMapEncodeTiled(
        _data_type(driver, dtype), 2, address, [sizes(columns), sizes(rows)],
        [sizes(tensor_map.row_stride * dtype.itemsize)], [counts(tensor_map.box[1]), counts(tensor_map.box[0])],
        [counts(1), counts(1)], driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle, driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    check(result, f"cuTensorMapEncodeTiled({tensor_map.name})", kernel)
    return (ctypes.c_uint64 * 16)(*(int(word) for word in encoded.opaque))


class TensorMapArguments:
    """The tensor maps of one kernel, encoded for the buffers of its launches."""

    def __init__(self, kernel: kir.Kernel):
        self.kernel = kernel.name
        self.maps = [(m, kernel.array(m.param).dtype, None if is_symbolic(m.shape) else evaluate_shape(m.shape, {}))
                     for m in kernel.tensor_maps]
        self.encoded: dict[tuple, ctypes.Array] = {}

    def __call__(self, buffers: Mapping[str, torch.Tensor], values: Mapping[str, int] | None) -> list[ctypes.Array]:
        """Each tensor map's bytes, in the order of the kernel's parameters; ``values`` gives the sizes
        known only at run time."""
        found = []
        for tensor_map, dtype, shape in self.maps:
            address = buffers[tensor_map.param].data_ptr()
            if shape is None:
                shape = evaluate_shape(tensor_map.shape, values or {})
            key = (tensor_map.name, address, shape)
            encoded = self.encoded.get(key)
            if encoded is None:
                if len(self.encoded) >= _MAX_KEPT:
                    self.encoded.pop(next(iter(self.encoded)))
                encoded = self.encoded[key] = encode(tensor_map, dtype, address, self.kernel, shape)
            found.append(encoded)
        return found

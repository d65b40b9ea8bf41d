"""Warp-wide tensor-core multiply-adds (``MmaTf32``, ``Mma16``) and tf32 rounding in Kernel IR and its simulator."""

from __future__ import annotations

import attrs
import pytest
import torch

from lamina.backends.reference import tf32
from lamina.backends.reference.simulator import simulate
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, kernel_ir as kir
from lamina.core.ir.expr import const, op
from tests.backends.mma_kernels import (
    ROUNDING_CASES, TX, WARPS, one_mma_per_warp, one_sixteen_bit_mma_per_warp, operands, sixteen_bit_operands,
    tf32_rounding,
)

F32 = dtypes.float32


def test_each_warp_adds_the_tf32_product_of_its_pieces():
    a, b, c = operands()
    d = torch.full((WARPS * 128,), float("nan"))
    report = simulate(one_mma_per_warp(), {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": d})
    assert report.faults == []
    expected = tf32.truncated(a).double() @ tf32.truncated(b).double() + c.double()
    torch.testing.assert_close(d.view(WARPS, 16, 8).double(), expected, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(d.view(WARPS, 16, 8).double(), a.double() @ b.double() + c.double(), rtol=1e-6, atol=0)


def test_an_mma_that_only_part_of_a_warp_runs_is_an_error():
    a, b, c = operands()
    kernel = one_mma_per_warp(guard=op("lt", TX, 16))
    with pytest.raises(SimulationError, match="part of the warp"):
        simulate(kernel, {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": torch.zeros(WARPS * 128)})


def test_the_verifier_names_what_an_mma_lacks():
    with pytest.raises(VerificationError, match="4 values of A and 2 of B per lane, not 4, 3 and 2"):
        kir.verify_kernel(one_mma_per_warp(a_values=3))
    with pytest.raises(VerificationError, match="must be an f32 register array"):
        kir.verify_kernel(one_mma_per_warp(acc_space="shared"))


def test_an_mma_prints_as_its_accumulators_and_pieces():
    (line,) = [text for text in kir.format_kernel(one_mma_per_warp()).splitlines() if "mma m16n8k8" in text]
    assert line == (
        "  mma m16n8k8 tf32 (acc[0], acc[1], acc[2], acc[3]) += (a[threadIdx.x // 32 * 128 + g * 8 + t], "
        "a[threadIdx.x // 32 * 128 + g * 8 + t + 64], a[threadIdx.x // 32 * 128 + g * 8 + t + 4], "
        "a[threadIdx.x // 32 * 128 + g * 8 + t + 68]) x (b[threadIdx.x // 32 * 64 + t * 8 + g], "
        "b[threadIdx.x // 32 * 64 + t * 8 + g + 32])"
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_each_warp_adds_the_product_of_its_sixteen_bit_pairs(dtype):
    a, b, c = sixteen_bit_operands(dtype)
    d = torch.full((WARPS * 128,), float("nan"))
    kernel = one_sixteen_bit_mma_per_warp(dtypes.from_name(str(dtype).removeprefix("torch.")))
    report = simulate(kernel, {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": d})
    assert report.faults == []
    torch.testing.assert_close(d.view(WARPS, 16, 8).double(), a.double() @ b.double() + c.double(),
                               rtol=1e-6, atol=1e-6)


def test_a_sixteen_bit_mma_that_only_part_of_a_warp_runs_is_an_error():
    a, b, c = sixteen_bit_operands(torch.bfloat16)
    kernel = one_sixteen_bit_mma_per_warp(guard=op("lt", TX, 16))
    with pytest.raises(SimulationError, match="part of the warp"):
        simulate(kernel, {"a": a.flatten(), "b": b.flatten(), "c": c.flatten(), "d": torch.zeros(WARPS * 128)})


def test_a_sixteen_bit_mma_prints_its_operand_type_and_takes_only_packed_pairs():
    kernel = one_sixteen_bit_mma_per_warp()
    (line,) = [text for text in kir.format_kernel(kernel).splitlines() if "mma m16n8k16" in text]
    assert line.startswith("  mma m16n8k16 bf16 (acc[0], acc[1], acc[2], acc[3]) += (bf16x2(")
    (mma,) = [s for s in kir.statements(kernel.body) if isinstance(s, kir.Mma16)]
    unpacked = attrs.evolve(mma, b=(const(1.0, F32), mma.b[1]))
    with pytest.raises(VerificationError, match="32-bit words of two 16-bit values"):
        kir.verify_kernel(attrs.evolve(kernel, body=tuple(unpacked if s is mma else s for s in kernel.body)))


def rounded_by_kernel(x: torch.Tensor) -> torch.Tensor:
    kernel = tf32_rounding(x.numel())
    assert "y[threadIdx.x] = tf32(x[threadIdx.x])" in kir.format_kernel(kernel)
    y = torch.full_like(x, float("nan"))
    simulate(kernel, {"x": x, "y": y})
    return y


def test_tf32_rounds_to_the_nearest_ten_bit_mantissa_ties_away_from_zero():
    ulp = 2.0 ** -10
    y = rounded_by_kernel(torch.tensor(ROUNDING_CASES))
    assert y[:5].tolist() == [1.0, 1 + ulp, 1.0, 1 + ulp, -(1 + ulp)]
    assert abs(y[5].item() / 3.0e38 - 1) <= ulp / 2 and abs(y[6].item() / 1e-40 - 1) < 0.05
    assert y[7] == float("inf") and y[8] == -float("inf") and torch.isnan(y[9])
    assert (y.view(torch.int32)[:7] & 0x1FFF == 0).all()


def test_tf32_of_a_non_f32_value_is_rejected_by_the_verifier():
    kernel = kir.Kernel(
        name="bad", params=[kir.Param("y", F32, 1, writable=True)], arrays=[],
        body=[kir.Store("y", (const(0),), kir.Tf32(const(1.0, dtypes.float64)))],
        launch=kir.Launch((1, 1, 1), (1, 1, 1)),
    )
    with pytest.raises(VerificationError, match="tf32 rounding of a f64 value"):
        kir.verify_kernel(kernel)

"""The relative error of the project's method, summed in pieces."""

import math

import pytest
import torch

from lamina.bench.measure import relative_error


@pytest.mark.parametrize("chunk", [1, 7, 1000, 1 << 24])
def test_the_error_summed_in_pieces_is_the_error_of_the_whole(chunk):
    reference = torch.randn(33, 17)
    out = (reference.double() + 1e-3 * torch.randn(33, 17, dtype=torch.float64)).float()
    difference = torch.linalg.vector_norm(out.double() - reference.double())
    expected = float(difference / torch.linalg.vector_norm(reference.double()))
    assert relative_error(out, reference, chunk=chunk) == pytest.approx(expected, rel=1e-12)


def test_a_value_that_is_not_finite_or_another_shape_is_an_infinite_error():
    reference = torch.randn(5, 9)
    out = reference.clone()
    out[4, 8] = float("nan")
    assert relative_error(out, reference, chunk=4) == math.inf
    assert relative_error(reference.reshape(9, 5), reference) == math.inf


def test_a_zero_reference_gives_the_distance_itself():
    assert relative_error(torch.full((3,), 2.0), torch.zeros(3)) == pytest.approx(math.sqrt(12))

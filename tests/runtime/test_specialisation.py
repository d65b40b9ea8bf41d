"""A compiled function compiles once per signature of its inputs, and keeps each."""

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error


def scaled_softmax(x, scale):
    return torch.softmax(x * scale, dim=-1)


def test_each_signature_compiles_once_and_is_reused():
    x = torch.randn(6, 33)
    compiled = lamina.compile(torch.tanh, (x,))
    shapes = [(6, 33), (7, 33), (6, 33), (7, 33), (2, 5, 9)]
    for shape in shapes:
        y = torch.randn(shape)
        assert relative_error(compiled(y), torch.tanh(y.double())) < 1e-6
    assert [sig[0][0] for sig in compiled.specializations] == [(6, 33), (7, 33), (2, 5, 9)]
    assert compiled.compilation is compiled.specializations[((6, 33), torch.float32),].compilation


def test_a_python_number_is_part_of_the_signature():
    x = torch.randn(5, 12)
    compiled = lamina.compile(scaled_softmax, (x, 0.5))
    for scale in (0.5, 2.0):
        assert relative_error(compiled(x, scale), float64_reference(lambda t: scaled_softmax(t, scale), (x,))) < 1e-6
    assert len(compiled.specializations) == 2


def test_a_wrong_number_of_inputs_is_still_an_error():
    compiled = lamina.compile(torch.add, (torch.randn(3), torch.randn(3)))
    with pytest.raises(lamina.LaminaError, match="compiled for 2 inputs and was called with 3"):
        compiled(torch.randn(3), torch.randn(3), torch.randn(3))
    assert len(compiled.specializations) == 1


def test_an_input_that_is_neither_tensor_nor_number_is_an_error():
    compiled = lamina.compile(torch.add, (torch.randn(3), torch.randn(3)))
    with pytest.raises(lamina.LaminaError, match="input 1 is a str; lamina programs take tensors and Python numbers"):
        compiled(torch.randn(3), "3")


def test_inputs_on_several_devices_are_an_error():
    compiled = lamina.compile(torch.add, (torch.randn(3), torch.randn(3)))
    with pytest.raises(lamina.LaminaError, match="inputs are on several devices"):
        compiled(torch.randn(3), torch.randn(3, device="meta"))

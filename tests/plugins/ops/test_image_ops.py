"""Convolutions, batch norm and pooling through the whole compiler: a small CNN against eager
PyTorch in float64, the kernels it becomes, and the errors for what lamina does not compile."""

from __future__ import annotations

import functools
import re

import pytest
import torch
from torch import nn

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.reference.interpreter import interpret
from lamina.bench.measure import relative_error
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, tensor_ir
from lamina.core.ir.tensor_builder import TensorBuilder
from lamina.core.ir.torch_ir import Input, TensorType
from lamina.models import cast_floating_state
from lamina.plugins.ops.padding import pad

SIDES = (13, 16)
"""13 pixels is a multiple of no tile and odd against the pooling's stride of 2; 16 is a multiple of most."""


def _randomise_statistics(model: nn.Module) -> nn.Module:
    """Running statistics and affine parameters away from their identity defaults, so that a
    batch norm that did nothing would show."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0.0, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
    return model.eval()


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(8, 13, 3, padding=1), nn.BatchNorm2d(13), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(13, 5)

    def forward(self, images):
        return self.classifier(torch.flatten(self.pool(self.features(images)), 1))


def conv_bn_relu() -> nn.Module:
    return _randomise_statistics(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                               nn.ReLU()))


@functools.cache
def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return _randomise_statistics(SmallCNN())


@functools.cache
def compiled_cnn(side: int) -> lamina.CompiledFunction:
    return lamina.compile(small_cnn(), (torch.randn(2, 3, side, side),))


def schedules(compiled: lamina.CompiledFunction) -> dict[str, str]:
    """Each kernel's schedule, as Tile IR names it."""
    return dict(re.findall(r"tile (\w+)\s+schedule=(\w+)", compiled.ir("tile")))


def float64_reference(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    with cast_floating_state(model, torch.float64), torch.no_grad():
        return model(images.double())


@pytest.mark.parametrize("side", SIDES)
def test_a_small_cnn_matches_eager_pytorch_in_float64(side):
    images = torch.randn(2, 3, side, side)
    out = compiled_cnn(side)(images)
    error = relative_error(out, float64_reference(small_cnn(), images))
    assert error < 1e-4, f"{side}x{side} images: relative error {error:.2e}"


@pytest.mark.parametrize("side", SIDES)
def test_the_cnns_convolutions_are_contractions(side):
    found = schedules(compiled_cnn(side))
    convolutions = [name for name in found if name.startswith("conv")]
    assert len(convolutions) == 2, found
    assert all(found[name] == "contraction" for name in convolutions), found


def test_conv_batch_norm_relu_is_one_contraction_kernel():
    model = conv_bn_relu()
    images = torch.randn(2, 3, 13, 13)
    compiled = lamina.compile(model, (images,))
    assert compiled.kernel_count == 1
    assert list(schedules(compiled).values()) == ["contraction"]
    assert relative_error(compiled(images), float64_reference(model, images)) < 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_half_conv_batch_norm_relu_adds_up_in_float32_in_one_kernel(dtype):
    model = conv_bn_relu().to(dtype)
    images = torch.randn(2, 3, 13, 13, dtype=dtype)
    compiled = lamina.compile(model, (images,))
    assert compiled.kernel_count == 1
    assert "acc0: f32" in compiled.ir("loop")
    with torch.no_grad():
        eager = model(images)
    assert relative_error(compiled(images), eager) < (4e-3 if dtype == torch.float16 else 2e-2)


def test_the_cnn_through_torch_compile_matches_eager_pytorch():
    torch._dynamo.reset()
    model = small_cnn()
    compiled = torch.compile(model, backend="lamina")
    images = torch.randn(2, 3, 13, 13)
    with torch.no_grad():
        out = compiled(images)
    assert relative_error(out, float64_reference(model, images)) < 1e-4


def test_every_kernel_of_the_cnn_compiles_with_nvrtc_for_sm_90():
    kernels = compiled_cnn(13).compilation.kernels
    compiled = CudaBackend().compile(kernels, "sm_90")
    assert set(compiled) == {k.name for k in kernels.kernels}
    assert all(k.cubin for k in compiled.values())


def _builder(shape) -> TensorBuilder:
    return TensorBuilder([Input("x", TensorType(shape, dtypes.float32))])


def test_padding_reads_in_bounds_and_fills_the_border_from_coordinates():
    b = _builder((4, 5))
    padded = pad(b, "x", [1, 2, 0, -1], 0.5)
    program = b.program([padded])
    read, fill = (tensor_ir.format_op(o).split(" = ", 1)[1] for o in program.ops)
    assert read == "index_map (d0, d1) -> x[d0, min(max(d1 - 1, 0), 4)]"
    assert fill == "elementwise where(d1 >= 1 and d1 < 6, padded, 0.5)"
    x = torch.randn(4, 5)
    (result,) = interpret(program, {"x": x})
    assert torch.equal(result, nn.functional.pad(x, (1, 2, 0, -1), value=0.5))


def test_a_crop_is_a_view_and_no_padding_is_the_value_itself():
    b = _builder((4, 5))
    assert pad(b, "x", [0, 0, 0, 0], 1.0) == "x"
    cropped = pad(b, "x", [-1, -2], 1.0)
    assert [type(o).__name__ for o in b.program([cropped]).ops] == ["IndexMap"]


def _fails_with(program, inputs, *fragments: str) -> None:
    with pytest.raises(LaminaError) as error:
        lamina.compile(program, inputs)
    for fragment in fragments:
        assert fragment in str(error.value)


def test_a_transposed_convolution_is_refused_with_its_source_line():
    layer = nn.ConvTranspose2d(3, 4, 3).eval()
    _fails_with(layer, (torch.randn(1, 3, 5, 5),), "transposed convolution", "not supported")


def test_batch_norm_in_training_is_refused_for_updating_its_statistics():
    layer = nn.BatchNorm2d(3).train()
    _fails_with(layer, (torch.randn(2, 3, 5, 5),), "updates running_mean in place")


def test_padding_an_integer_tensor_with_infinity_is_refused():
    _fails_with(lambda x: nn.functional.pad(x, (1, 1), value=float("-inf")), (torch.arange(6).reshape(2, 3),),
                "finite")

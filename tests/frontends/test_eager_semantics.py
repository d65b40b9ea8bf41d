"""``lamina.compile`` answers as the eager program would when it is called: current weights and
buffers, outputs that alias as eager's do, and a clear word where a gradient is asked for."""

from __future__ import annotations

import pytest
import torch

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.frontends.torch.call_binding import InferenceOnlyError

ROWS, WIDTH, OUT = 5, 7, 3


def close(ours: torch.Tensor, eager: torch.Tensor) -> bool:
    return ours.shape == eager.shape and relative_error(ours, eager) < 1e-5


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(ROWS, WIDTH)


def compiled_linear(x):
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, OUT), torch.nn.Tanh())
    return model, lamina.compile(model, (x,))


def test_a_replaced_weight_is_the_one_used(x):
    model, compiled = compiled_linear(x)
    model[0].weight = torch.nn.Parameter(torch.randn(OUT, WIDTH))
    assert close(compiled(x), float64_reference(model.double(), (x,)).float())


def test_a_weight_whose_data_is_reassigned_is_read_anew(x):
    model, compiled = compiled_linear(x)
    model[0].weight.data = torch.randn(OUT, WIDTH)
    with torch.no_grad():
        assert close(compiled(x), model(x))


def test_an_optimizer_step_shows_in_the_next_call(x):
    model, compiled = compiled_linear(x)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(x).square().sum().backward()
    optimizer.step()
    with torch.no_grad():
        assert close(compiled(x), model(x))


def test_a_replaced_submodule_is_the_one_used(x):
    model, compiled = compiled_linear(x)
    compiled(x)
    model[0] = torch.nn.Linear(WIDTH, OUT)
    with torch.no_grad():
        assert close(compiled(x), model(x))
    assert len(compiled.specializations) == 1


def test_a_module_that_a_function_reaches_by_name_is_read_at_each_call(x):
    """Through a closure or a bound method, as through the module itself."""
    linear = torch.nn.Linear(WIDTH, OUT)
    through_closure = lamina.compile(lambda a: linear(a).relu(), (x,))
    through_method = lamina.compile(linear.forward, (x,))
    linear.weight = torch.nn.Parameter(torch.randn(OUT, WIDTH))
    linear.bias.data = torch.randn(OUT)
    with torch.no_grad():
        assert close(through_closure(x), linear(x).relu())
        assert close(through_method(x), linear(x))


def test_a_weight_of_another_shape_or_a_removed_bias_compiles_again(x):
    model, compiled = compiled_linear(x)
    model[0] = torch.nn.Linear(WIDTH, OUT + 2)
    with torch.no_grad():
        assert close(compiled(x), model(x))
        model[0].bias = None
        assert close(compiled(x), model(x))
        model[0].weight = torch.nn.Parameter(torch.randn(OUT + 2, WIDTH, dtype=torch.float64))
        assert close(compiled(x.double()), model(x.double()))


class Scaled(torch.nn.Module):
    """A non-persistent buffer and a plain tensor attribute, both folded into the program."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.randn(WIDTH), persistent=False)
        self.shift = torch.randn(WIDTH)

    def forward(self, x):
        return x * self.scale.exp() + self.shift.cos()


def test_a_folded_buffer_written_in_place_is_folded_again(x):
    module = Scaled()
    compiled = lamina.compile(module, (x,))
    assert "constant" in [i.kind for i in compiled.compilation.graph.inputs]
    module.scale.fill_(0.25)
    assert close(compiled(x), module(x))
    module.shift.mul_(-3)
    assert close(compiled(x), module(x))


def test_a_folded_buffer_replaced_or_reassigned_is_folded_again(x):
    module = Scaled()
    compiled = lamina.compile(module, (x,))
    module.scale = torch.randn(WIDTH)
    assert close(compiled(x), module(x))
    module.scale.data = torch.randn(WIDTH)
    assert close(compiled(x), module(x))


def test_a_folded_buffer_restored_to_its_value_keeps_the_compiled_program(x):
    module = Scaled()
    compiled = lamina.compile(module, (x,))
    (specialization,) = compiled.specializations.values()
    module.scale.data = module.scale.data.double()
    module.scale.data = module.scale.data.float()
    module.shift.mul_(2).div_(2)
    assert close(compiled(x), module(x))
    assert list(compiled.specializations.values()) == [specialization]


def test_a_tensor_of_a_closure_written_in_place_is_folded_again(x):
    table = torch.randn(WIDTH)
    compiled = lamina.compile(lambda a: a + table.sin(), (x,))
    table.mul_(2)
    assert close(compiled(x), x + table.sin())


def test_outputs_need_grad_where_eager_would_and_backward_says_what_to_use(x):
    model, compiled = compiled_linear(x)
    out = compiled(x)
    assert out.requires_grad and close(out.detach(), model(x).detach())
    with pytest.raises(InferenceOnlyError, match=r'compiles inference only.*torch.compile\(model, backend="lamina"\)'):
        out.sum().backward()
    leaf = x.clone().requires_grad_()
    function = lamina.compile(lambda a: a.exp() * 2, (leaf,))
    assert function(leaf).requires_grad
    with pytest.raises(lamina.LaminaError, match="torch.no_grad"):
        torch.autograd.grad(function(leaf).sum(), leaf)


def test_under_no_grad_and_inference_mode_outputs_need_no_grad(x):
    model, compiled = compiled_linear(x)
    leaf = x.clone().requires_grad_()
    with torch.no_grad():
        out = compiled(leaf)
        assert not out.requires_grad and close(out, model(x))
    with torch.inference_mode():
        out = compiled(leaf)
        assert not out.requires_grad and close(out, model(x))
    model.requires_grad_(False)
    assert not compiled(x).requires_grad


def test_integer_outputs_beside_ones_that_need_grad():
    leaf = torch.randn(ROWS, WIDTH, requires_grad=True)
    out, indices = lamina.compile(lambda a: (a * 3, a.argmax(-1)), (leaf,))(leaf)
    assert out.requires_grad and not indices.requires_grad
    assert torch.equal(indices, leaf.argmax(-1))


def test_an_input_returned_is_the_input(x):
    compiled = lamina.compile(lambda a: a, (x,))
    assert compiled(x) is x
    y = torch.randn(ROWS, WIDTH)
    assert compiled(y) is y


def test_a_value_returned_twice_is_one_tensor(x):
    def twice(a):
        y = a * 2
        return y, y

    first, second = lamina.compile(twice, (x,))(x)
    assert first is second and close(first, x * 2)


@pytest.mark.parametrize("view", [
    lambda a: a.view(WIDTH, ROWS),
    lambda a: a.transpose(0, 1),
    lambda a: a[1:],
    lambda a: a[:, 2:5].unsqueeze(0),
    lambda a: a[3],
    lambda a: a.unbind(1)[2],
    lambda a: a.reshape(-1),
], ids=["view", "transpose", "slice", "slice-unsqueeze", "select", "unbind", "reshape"])
def test_a_view_of_an_input_is_a_view_of_it(x, view):
    compiled = lamina.compile(view, (x,))
    y = torch.randn(ROWS, WIDTH)
    out = compiled(y)
    expected = view(y)
    assert out._base is y and out.shape == expected.shape and out.stride() == expected.stride()
    assert torch.equal(out, expected)
    out.mul_(0)
    assert torch.equal(view(y), torch.zeros_like(expected))


def test_views_of_an_output_are_views_of_it(x):
    def program(a):
        y = a.exp() + 1
        return y.t(), y, y[2:], a.t()

    compiled = lamina.compile(program, (x,))
    transposed, y, tail, input_transposed = compiled(x)
    assert close(y, x.exp() + 1)
    assert transposed._base is y and tail._base is y and input_transposed._base is x
    assert torch.equal(transposed, y.t()) and torch.equal(tail, y[2:])


def test_the_pieces_of_a_split_output_are_views_of_it(x):
    def program(a):
        y = a.tanh()
        return (y, *y.split(3, dim=1))

    y, *pieces = lamina.compile(program, (x,))(x)
    assert close(y, x.tanh()) and len(pieces) == 3
    assert all(piece._base is y for piece in pieces)
    assert all(torch.equal(piece, expected) for piece, expected in zip(pieces, y.split(3, dim=1)))


def test_module_state_returned_is_the_module_s_tensor(x):
    class Returns(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(WIDTH))
            self.register_buffer("table", torch.randn(2, WIDTH), persistent=False)

        def forward(self, a):
            return self.weight, self.table[1], a * self.weight

    module = Returns()
    weight, row, product = lamina.compile(module, (x,))(x)
    assert weight is module.weight
    assert row._base is module.table and torch.equal(row, module.table[1])
    assert close(product.detach(), (x * module.weight).detach())


@pytest.mark.gpu
def test_on_the_gpu_weights_buffers_and_aliases_follow_eager():
    module = torch.nn.Sequential(torch.nn.Linear(WIDTH, 33), Scaled2(33)).cuda()
    x = torch.randn(ROWS, WIDTH, device="cuda")

    def program(a):
        y = module(a)
        return y, y, y.t(), a[1:]

    compiled = lamina.compile(program, (x,))
    module[0].weight = torch.nn.Parameter(torch.randn(33, WIDTH, device="cuda"))
    module[1].scale.mul_(-2)
    with torch.no_grad():
        y, again, transposed, tail = compiled(x)
        expected = module(x)
    assert y.is_cuda and y is again and transposed._base is y and tail._base is x
    assert relative_error(y, expected) < 1e-4


class Scaled2(torch.nn.Module):
    """A non-persistent buffer folded into the program, of a given width."""

    def __init__(self, width: int):
        super().__init__()
        self.register_buffer("scale", torch.randn(width), persistent=False)

    def forward(self, x):
        return x * self.scale.exp()

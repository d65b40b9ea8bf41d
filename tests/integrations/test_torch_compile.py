"""``torch.compile(..., backend="lamina")``: whole graphs, new shapes, unsupported ops, the entry point."""

from __future__ import annotations

import contextlib
import copy
import importlib
import tomllib
import warnings
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

from lamina.bench.measure import float64_reference, relative_error
from lamina.core.errors import ConfigError, UnsupportedOpError
from lamina.core.ir import expr as ex, kernel_ir, loop_ir, sizes
from lamina.integrations.torch_compile import decompositions, lamina_backend

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def installed() -> bool:
    return "lamina" in entry_points(group="torch_dynamo_backends").names


@pytest.fixture
def backend():
    """The backend by name once lamina is installed, else the function the name resolves to."""
    return "lamina" if installed() else lamina_backend


def raised_by_lamina(error: Exception) -> Exception:
    """The error lamina raised: Dynamo reports a backend's error wrapped in its own."""
    return getattr(error, "inner_exception", error)


def running_example(x, bias, w):
    return torch.relu(torch.matmul(x + bias, w))


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.SiLU(), torch.nn.Linear(40, 7)).eval()


def test_the_entry_point_names_the_backend():
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["torch_dynamo_backends"]
    module, _, attribute = declared["lamina"].partition(":")
    assert getattr(importlib.import_module(module), attribute) is lamina_backend


@pytest.mark.skipif(not installed(), reason="lamina is not installed, so its entry points are not visible")
def test_torch_finds_the_installed_backend_by_name():
    from torch._dynamo.backends.registry import lookup_backend

    assert "lamina" in torch._dynamo.list_backends(exclude_tags=())
    assert lookup_backend("lamina") is lamina_backend


def test_running_example_matches_eager(backend):
    inputs = (torch.randn(16, 64), torch.randn(64), torch.randn(64, 16))
    out = torch.compile(running_example, backend=backend)(*inputs)
    assert relative_error(out, float64_reference(running_example, inputs)) < 1e-5


def test_an_mlp_matches_eager_and_reads_its_current_weights(backend):
    model = mlp()
    x = torch.randn(13, 24)
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        assert relative_error(compiled(x), copy.deepcopy(model).double()(x.double())) < 1e-5
        model[2].weight.mul_(-1.5)
        assert relative_error(compiled(x), copy.deepcopy(model).double()(x.double())) < 1e-5


def test_new_shapes_compile_once_more_for_every_size_and_match(backend, monkeypatch):
    """The first size compiles as it is; at the second, Dynamo makes the size symbolic, and lamina
    compiles that graph once for every size (``tests/integrations/test_symbolic_sizes.py``)."""
    from lamina.api import Compiler

    compiled_graphs = []
    original = Compiler.compile_captured
    monkeypatch.setattr(Compiler, "compile_captured",
                        lambda self, *a, **k: compiled_graphs.append(a[0].graph) or original(self, *a, **k))
    model = mlp()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in (13, 17, 5, 13, 40):
            x = torch.randn(rows, 24)
            assert relative_error(compiled(x), copy.deepcopy(model).double()(x.double())) < 1e-5
    assert [any(sizes.is_symbolic(i.type.shape) for i in g.inputs) for g in compiled_graphs] == [False, True]


def sort_and_topk(x, w):
    y = torch.relu(x @ w)
    return torch.sort(y, dim=-1).values * 2.0 + torch.topk(y, 3, dim=-1).values.sum(dim=-1, keepdim=True)


def test_unsupported_ops_are_one_error_that_lists_them_all(backend):
    x, w = torch.randn(11, 24), torch.randn(24, 9)
    with pytest.raises(Exception) as caught:
        torch.compile(sort_and_topk, backend=backend)(x, w)
    error = raised_by_lamina(caught.value)
    assert isinstance(error, UnsupportedOpError)
    assert {op for op, _ in error.ops} == {"aten.sort.default", "aten.topk.default"}
    assert "aten.sort.default  at " in str(caught.value)
    assert 'options={"fallback": "eager"}' in str(caught.value)  # what a user can do at once


def test_eager_fallback_runs_unsupported_ops_in_pytorch_and_names_them(backend):
    x, w = torch.randn(11, 24), torch.randn(24, 9)
    compiled = torch.compile(sort_and_topk, backend=backend, options={"fallback": "eager"})
    with pytest.warns(UserWarning, match=r"ran these ops in PyTorch, not lamina: aten.sort.default, aten.topk.default$"):
        out = compiled(x, w)
    assert relative_error(out, float64_reference(sort_and_topk, (x, w))) < 1e-5


def complex_rotation(x, angles):
    """Llama-4's rotary embedding: pairs of features as complex numbers, turned by ``polar``."""
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2) * 2 + 1


def test_complex_tensors_are_one_error_that_names_their_ops_and_the_fallback_runs_them(backend):
    x, angles = torch.randn(5, 8), torch.randn(5, 4)
    with pytest.raises(Exception) as caught:
        torch.compile(complex_rotation, backend=backend)(x, angles)
    said = str(raised_by_lamina(caught.value))
    assert "aten.polar.default (complex64)" in said and "aten.mul.Tensor (complex64)" in said
    assert 'options={"fallback": "eager"}' in said
    compiled = torch.compile(complex_rotation, backend=backend, options={"fallback": "eager"})
    with pytest.warns(UserWarning, match=r"aten.mul.Tensor \(complex64\)"):
        out = compiled(x, angles)
    assert relative_error(out, float64_reference(complex_rotation, (x, angles))) < 1e-5


def chunks_of_a_transpose(x, w):
    """Longformer's overlapping chunks: ``as_strided`` over a product that eager lays out transposed,
    whose storage lamina's row-major values would order otherwise."""
    y = (x @ w).transpose(0, 1) * 2
    return torch.as_strided(y, (3, 4, 9), (4 * 11, 11, 1)).sum(-1), torch.as_strided(x * 3, (5, 6), (2, 3), 4)


def chunks_of_a_gapped_view(x, w):
    """The same over every other column of that product: a view with gaps, which PyTorch reads."""
    y = (x @ w).transpose(0, 1) * 2
    return torch.as_strided(y[:, ::2], (5, 3), (2, 5)) + 1


def test_as_strided_reads_the_storage_as_eager_lays_it_out(backend):
    x, w = torch.randn(11, 24), torch.randn(24, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = torch.compile(chunks_of_a_transpose, backend=backend)(x, w)
    for ours, expected in zip(out, float64_reference(chunks_of_a_transpose, (x, w))):
        assert relative_error(ours, expected) < 1e-5


def before_a_slice(x):
    """``as_strided`` of a slice, reading the storage before the slice's first element."""
    return torch.as_strided(x[2:] * 1, (4,), (1,), 0) + torch.as_strided(x[2:], (4,), (1,), 0)


def test_as_strided_that_reads_around_its_input_runs_in_pytorch(backend):
    x = torch.randn(9)
    with pytest.raises(Exception, match="reads none of the storage around it"):
        torch.compile(before_a_slice, backend=backend)(x)
    compiled = torch.compile(before_a_slice, backend=backend, options={"fallback": "eager"})
    with pytest.warns(UserWarning, match="aten.as_strided.default"):
        out = compiled(x)
    torch.testing.assert_close(out, before_a_slice(x))


def test_what_pytorch_reads_by_its_strides_is_laid_out_as_in_eager(backend):
    x, w = torch.randn(11, 24), torch.randn(24, 16)
    compiled = torch.compile(chunks_of_a_gapped_view, backend=backend, options={"fallback": "eager"})
    with pytest.warns(UserWarning, match="aten.as_strided.default, aten.slice.Tensor"):
        out = compiled(x, w)
    assert relative_error(out, float64_reference(chunks_of_a_gapped_view, (x, w))) < 1e-5


def write_at(cache, positions, values):
    cache.index_copy_(0, positions, values)
    return cache.sum(dim=0) * 2


def write_then_sort(cache, positions, values):
    cache.index_copy_(0, positions, values)
    return torch.sort(cache.sum(dim=1)).values


@pytest.mark.parametrize("fallback", [None, "eager"])
def test_an_updated_argument_is_written_by_the_program(monkeypatch, fallback):
    """A static cache's update stays in the program (a write into the argument), not a copy
    that PyTorch makes after the call; with the eager fallback too, beside an op run in PyTorch."""
    import lamina.integrations.torch_compile as integration

    programs = []
    original = integration.fx_to_torch_ir
    monkeypatch.setattr(integration, "fx_to_torch_ir", lambda g: programs.append(original(g)) or programs[-1])
    function = write_at if fallback is None else write_then_sort
    compiled = torch.compile(function, backend=lamina_backend, options={"fallback": fallback})
    cache = torch.randn(16, 8)
    expected = cache.clone()
    with torch.no_grad(), pytest.warns(UserWarning) if fallback else contextlib.nullcontext():
        for step in range(3):
            positions, values = torch.tensor([step, 15 - step]), torch.randn(2, 8)
            out = compiled(cache, positions, values)
            torch.testing.assert_close(out, function(expected, positions, values))
            torch.testing.assert_close(cache, expected)
    assert [position for program in programs for position, _ in program.writes] == [0]


def decoding_step(cache, position, keys, query):
    cache.index_copy_(2, position, keys)
    return (query @ cache.transpose(-1, -2)).softmax(-1)


def test_a_cache_updated_at_one_position_is_written_there_in_place(monkeypatch):
    """A decoding step's cache update writes the new row into the argument itself: the program's
    output is the argument, its kernel has no loop over the cache's positions, and nothing is copied."""
    import lamina.integrations.torch_compile as integration

    compiled_programs = []
    original = integration.GraphRunner._compile
    monkeypatch.setattr(integration.GraphRunner, "_compile",
                        lambda self, g, inputs: compiled_programs.append(original(self, g, inputs)) or compiled_programs[-1])
    in_place = []
    same_tensor = integration._same_tensor
    monkeypatch.setattr(integration, "_same_tensor", lambda a, b: in_place.append(same_tensor(a, b)) or in_place[-1])
    compiled = torch.compile(decoding_step, backend=lamina_backend)
    cache = torch.randn(1, 3, 37, 16)
    expected = cache.clone()
    with torch.no_grad():
        for position in (0, 36, 17):
            keys, query = torch.randn(1, 3, 1, 16), torch.randn(1, 3, 1, 16)
            out = compiled(cache, torch.tensor([position]), keys, query)
            torch.testing.assert_close(out, decoding_step(expected, torch.tensor([position]), keys, query))
            torch.testing.assert_close(cache, expected, rtol=0, atol=0)
    (_, specialization), = compiled_programs
    loop = specialization.compilation.loop
    cache_name = loop.inputs[0].name
    assert cache_name in [b.name for b in loop.outputs]
    writer, = [k for k in loop.kernels if any(b.name == cache_name for b in k.outputs)]
    assert sum(isinstance(s, loop_ir.Loop) for s in loop_ir.statements(writer.body)) == 3
    assert in_place == [True, True, True]
    # the row is stored only where its position lies in the cache, and nothing of the cache is read
    kernel, = [k for k in specialization.compilation.kernels.kernels if k.name == writer.name]
    body = list(kernel_ir.statements(kernel.body))
    guarded = {id(s) for branch in body if isinstance(branch, kernel_ir.If) for s in kernel_ir.statements(branch.then)}
    stores = [s for s in body if isinstance(s, (kernel_ir.Store, kernel_ir.VectorStore)) and
              (s.array if isinstance(s, kernel_ir.Store) else s.dst) == cache_name]
    assert stores and all(id(s) in guarded for s in stores)
    read = {s.src for s in body if isinstance(s, kernel_ir.VectorLoad)}
    read |= {n.array for s in body for e in kernel_ir.expressions(s) for n in ex.walk(e) if isinstance(n, kernel_ir.Load)}
    assert cache_name not in read


def old_and_new(cache, position, values):
    old = cache * 2
    cache.index_copy_(0, position, values)
    return old.sum(dim=0) + cache.sum(dim=0)


def test_a_cache_whose_old_value_is_read_too_is_still_updated_right():
    """Where a kernel reads the old value after the update, the update is not in place: the result is eager's."""
    compiled = torch.compile(old_and_new, backend=lamina_backend)
    cache = torch.randn(9, 5)
    expected = cache.clone()
    with torch.no_grad():
        for position in (3, 8):
            values = torch.randn(1, 5)
            out = compiled(cache, torch.tensor([position]), values)
            torch.testing.assert_close(out, old_and_new(expected, torch.tensor([position]), values))
            torch.testing.assert_close(cache, expected, rtol=0, atol=0)


def test_lamina_settings_pass_through_options(backend):
    inputs = (torch.randn(9, 20), torch.randn(20), torch.randn(20, 6))
    out = torch.compile(running_example, backend=backend, options={"schedule": "generic"})(*inputs)
    assert relative_error(out, float64_reference(running_example, inputs)) < 1e-5


def test_an_unknown_fallback_is_a_clear_error(backend):
    with pytest.raises(Exception) as caught:
        torch.compile(running_example, backend=backend, options={"fallback": "cpu"})(
            torch.randn(3, 4), torch.randn(4), torch.randn(4, 2))
    error = raised_by_lamina(caught.value)
    assert isinstance(error, ConfigError) and "unknown fallback 'cpu'" in str(error)


def test_kept_ops_stay_whole_and_the_rest_decompose():
    table = {str(op) for op in decompositions(("aten.linear.default", "aten.silu.default"))}
    assert "aten.linear.default" not in table and "aten.silu.default" not in table
    assert "aten.addcmul.default" in table


def test_gradients_flow_through_the_compiled_backward(backend):
    model = mlp().double()
    x = torch.randn(13, 24, dtype=torch.float64)
    reference = copy.deepcopy(model)
    torch.compile(model, backend=backend)(x).square().sum().backward()
    reference(x).square().sum().backward()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        assert relative_error(ours.grad, theirs.grad) < 1e-10

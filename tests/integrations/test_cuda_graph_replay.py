"""``mode="reduce-overhead"``: each inference call of a compiled graph replayed from a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import lamina.integrations.cuda_graphs as cuda_graphs
from lamina.core.errors import ConfigError
from lamina.integrations.torch_compile import lamina_backend
from lamina.models.architectures import architecture, build


@pytest.fixture
def recordings(monkeypatch) -> list:
    """Each CUDA graph recorded, as the arguments it copies."""
    made = []
    original = cuda_graphs._Recording.__init__

    def counted(self, run, args, copied, mutated_outputs):
        original(self, run, args, copied, mutated_outputs)
        made.append(copied)

    monkeypatch.setattr(cuda_graphs._Recording, "__init__", counted)
    return made


def affine(x, w, bias):
    return torch.relu(x @ w + bias)


def test_on_the_cpu_the_mode_changes_nothing():
    torch.manual_seed(0)
    x, w, bias = torch.randn(13, 24), torch.randn(24, 7), torch.randn(7)
    out = torch.compile(affine, backend=lamina_backend, mode="reduce-overhead")(x, w, bias)
    torch.testing.assert_close(out, affine(x, w, bias))


@pytest.mark.parametrize("settings,message", [
    (dict(mode="fastest"), "unknown mode 'fastest'"),
    (dict(options={"cuda_graphs": "yes"}), "the cuda_graphs option is True or False, not 'yes'"),
])
def test_an_unknown_mode_is_a_clear_error(settings, message):
    with pytest.raises(Exception) as caught:
        torch.compile(affine, backend=lamina_backend, **settings)(torch.randn(3, 4), torch.randn(4, 2), torch.randn(2))
    error = getattr(caught.value, "inner_exception", caught.value)
    assert isinstance(error, ConfigError) and message in str(error)


@pytest.mark.gpu
def test_calls_are_replayed_with_the_moving_arguments_copied(recordings):
    torch.manual_seed(0)
    w, bias = torch.randn(24, 7, device="cuda"), torch.randn(7, device="cuda")
    compiled = torch.compile(affine, backend=lamina_backend, mode="reduce-overhead")
    inputs = [torch.randn(13, 24, device="cuda") for _ in range(5)]
    outputs = [compiled(x, w, bias) for x in inputs]
    for x, out in zip(inputs, outputs):  # every output is still its call's, after later replays
        torch.testing.assert_close(out, affine(x, w, bias))
    assert recordings == [frozenset({0})]  # x copied; w and bias read where they are

    moved = w.clone() * 2  # a weight that moves: recorded again, with it copied too
    torch.testing.assert_close(compiled(inputs[0], moved, bias), affine(inputs[0], moved, bias))
    assert recordings[1:] == [frozenset({0, 1})]


@pytest.mark.gpu
def test_a_replays_outputs_are_the_callers_views_its_arguments_or_clones(recordings):
    """What a replay hands back is worked out when recording: a view of a copied argument is a view
    of the caller's argument, an argument read in place is that argument, anything else a clone."""
    def run(x, w):
        return x[1:].t(), w, torch.relu(x @ w)

    replay = cuda_graphs.CudaGraphReplay(run, mutated_outputs=0, static=True)
    torch.manual_seed(0)
    w = torch.randn(24, 7, device="cuda")
    inputs = [torch.randn(13, 24, device="cuda") for _ in range(4)]
    outputs = [replay(x, w) for x in inputs]
    assert recordings == [frozenset({0})]
    for x, (view, weight, product) in zip(inputs, outputs):
        assert view.data_ptr() == x[1:].data_ptr() and view.stride() == x[1:].t().stride()
        torch.testing.assert_close(view, x[1:].t())
        assert weight is w
        torch.testing.assert_close(product, torch.relu(x @ w))


def write_at(cache, positions, values):
    cache.index_copy_(0, positions, values)
    return cache.sum(dim=0) * 2


@pytest.mark.gpu
def test_an_argument_written_in_place_is_written_at_every_replay(recordings):
    torch.manual_seed(0)
    cache = torch.randn(16, 8, device="cuda")
    expected = cache.clone()
    compiled = torch.compile(write_at, backend=lamina_backend, mode="reduce-overhead")
    for step in range(5):
        if step == 3:  # a new cache, as each generate call makes: recorded again at the next call, in place
            cache = torch.randn(16, 8, device="cuda")
            expected = cache.clone()
        positions = torch.tensor([step, step + 8], device="cuda")
        values = torch.randn(2, 8, device="cuda")
        out = compiled(cache, positions, values)
        torch.testing.assert_close(out, write_at(expected, positions, values))
        torch.testing.assert_close(cache, expected)
    assert recordings == [frozenset({1, 2})] * 2  # the cache is never copied


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_greedy_generation_with_cuda_graphs_matches_eager(name, recordings):
    torch.manual_seed(0)
    model = build(architecture(name), size="small").cuda()
    ids = torch.randint(0, model.config.vocab_size, (1, 13), device="cuda")
    settings = dict(max_new_tokens=12, do_sample=False, cache_implementation="static", disable_compile=True)
    with torch.no_grad():
        expected = model.generate(ids, **settings)
        model.forward = torch.compile(model.forward, backend="lamina", mode="reduce-overhead")
        generated = model.generate(ids, **settings)
        again = model.generate(ids, **settings)
    assert torch.equal(generated, expected) and torch.equal(again, expected)
    # the decoding step's graph, and again for the second call's new cache (the prompt's step, with a
    # new cache at each call, runs without a graph)
    assert 1 <= len(recordings) <= 2


@pytest.mark.gpu
def test_a_graph_of_symbolic_sizes_keeps_a_bounded_number_of_recordings(recordings):
    """Each new length of a growing cache is a new signature: past ``MAX_RECORDINGS`` of them,
    calls run without a graph rather than each keeping a recording and its memory."""
    def grown(cache, new):
        return torch.cat([cache, new], dim=0) * 2

    f = torch.compile(grown, backend=lamina_backend, mode="reduce-overhead", dynamic=True)
    new = torch.randn(1, 8, device="cuda")
    caches = [torch.randn(length, 8, device="cuda") for length in range(3, 3 + 2 * cuda_graphs.MAX_RECORDINGS)]
    for _ in range(3):
        for cache in caches:
            torch.testing.assert_close(f(cache, new), grown(cache, new))
    assert len(recordings) == cuda_graphs.MAX_RECORDINGS

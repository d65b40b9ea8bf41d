"""A program loaded from the program cache finds its kernels' CUDA sources on disk: a warm start
prints no kernel (``lamina.backends.cuda.kernel_sources``)."""

from __future__ import annotations

import attrs
import pytest
import torch

import lamina
from lamina.backends.cuda import kernel_sources
from lamina.backends.cuda.backend import CudaBackend


def layers(x, w1, w2, w3, w4):
    """Three equal layers and a last: the second and third lower as one (``Program.repeats``),
    and the first prints as they do."""
    h = torch.relu(x @ w1)
    h = torch.relu(h @ w2)
    h = torch.relu(h @ w3)
    return torch.sigmoid(h @ w4)


def compiled(tmp_path, rows: int = 13):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 40, generator=generator)
    weights = [torch.randn(40, 40, generator=generator) for _ in range(4)]
    return lamina.compile(layers, (x, *weights), program_cache=True, cache_dir=str(tmp_path), target="sm_90")


def entries(tmp_path):
    return sorted((tmp_path / kernel_sources.FOLDER).glob("*.pickle"))


def test_a_program_from_the_program_cache_compiles_without_printing_a_kernel(tmp_path, monkeypatch):
    first = compiled(tmp_path).compilation
    backend = CudaBackend(cache_dir=tmp_path)
    cubins = {name: k.cubin for name, k in backend.compile(first.kernels, "sm_90", key=first.key).items()}
    assert first.key is not None and len(entries(tmp_path)) == 1
    printed = kernel_sources.print_sources(first.kernels)
    assert len(printed.sources) < len(first.kernels.kernels)  # the equal layers share one

    again = compiled(tmp_path).compilation
    assert "loading from the program cache" in again.timings.stages and again.key == first.key

    def refuse(kernel):
        raise AssertionError(f"{kernel.name} was printed")

    monkeypatch.setattr(kernel_sources, "emit_cuda", refuse)
    loaded = backend.compile(again.kernels, "sm_90", key=again.key)
    assert {name: k.cubin for name, k in loaded.items()} == cubins
    assert all(k.from_cache for k in loaded.values())


def test_kernels_that_repeat_an_earlier_one_take_its_source_as_a_comparison_finds(tmp_path, monkeypatch):
    program = compiled(tmp_path).compilation.kernels
    assert program.repeats
    compared = kernel_sources.print_sources(attrs.evolve(program, repeats=()))
    renamed = []
    anonymous = kernel_sources.anonymous_kernel
    monkeypatch.setattr(kernel_sources, "anonymous_kernel", lambda k, *a: renamed.append(k.name) or anonymous(k, *a))
    assert kernel_sources.print_sources(program) == compared
    assert not set(renamed) & {name for name, _ in program.repeats}


def test_the_kept_sources_are_those_printed(tmp_path):
    compilation = compiled(tmp_path).compilation
    printed = kernel_sources.kernel_sources(compilation.kernels, compilation.key, tmp_path)
    assert kernel_sources.kernel_sources(compilation.kernels, compilation.key, tmp_path) == printed
    assert printed == kernel_sources.print_sources(compilation.kernels)


def test_a_damaged_entry_is_printed_again_with_a_warning(tmp_path):
    compilation = compiled(tmp_path).compilation
    printed = kernel_sources.kernel_sources(compilation.kernels, compilation.key, tmp_path)
    (entry,) = entries(tmp_path)
    entry.write_bytes(entry.read_bytes()[:-20])
    with pytest.warns(UserWarning, match="is damaged"):
        assert kernel_sources.kernel_sources(compilation.kernels, compilation.key, tmp_path) == printed
    assert kernel_sources.kernel_sources(compilation.kernels, compilation.key, tmp_path) == printed


def test_an_entry_of_other_kernels_is_not_used(tmp_path):
    """The key names the program; an entry that names other kernels (a file copied in by hand)
    is printed over."""
    mine = compiled(tmp_path).compilation
    x, w = torch.randn(3, 8), torch.randn(8, 4)
    other = lamina.compile(lambda x, w: torch.tanh(x @ w), (x, w), target="sm_90").compilation
    kernel_sources.kernel_sources(other.kernels, mine.key, tmp_path)
    assert kernel_sources.kernel_sources(mine.kernels, mine.key, tmp_path) == kernel_sources.print_sources(mine.kernels)
    assert kernel_sources.kernel_sources(other.kernels, mine.key, tmp_path) == kernel_sources.print_sources(other.kernels)

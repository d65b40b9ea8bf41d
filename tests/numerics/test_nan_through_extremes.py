"""NaN and infinities through max, min, relu, clamp and their reductions, as eager PyTorch gives them.

``torch.maximum(NaN, x)`` is NaN, ``relu(NaN)`` is NaN, the ``amax`` of a row with a NaN is NaN
and its ``argmax`` the index of the row's first NaN. The CUDA printer writes ``max`` and ``min``
as NaN-propagating functions and the simulator computes the same, so these run on the simulator
here (every combine step of the reductions included: per thread, across a warp's shuffles,
across a block and across blocks) and on the GPU under the marker ``gpu``.
"""

from __future__ import annotations

import pytest
import torch

import lamina

from tests.numerics.nonfinite import INF, NAN, assert_same_nonfinite, planted

PROGRAMS = {
    "relu": lambda x, y: torch.relu(x),
    "clamp": lambda x, y: x.clamp(-0.5, 0.7),
    "clamp_min_tensor": lambda x, y: torch.clamp(x, min=y),
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "max_of_two": lambda x, y: torch.max(x, y),
    "amax_rows": lambda x, y: x.amax(-1),
    "amin_columns": lambda x, y: x.amin(0),
    "max_all": lambda x, y: x.max(),
    "min_all": lambda x, y: x.min(),
    "max_dim": lambda x, y: tuple(x.max(1)),
    "min_dim": lambda x, y: tuple(x.min(-1)),
    "argmax": lambda x, y: x.argmax(-1),
    "argmin_columns": lambda x, y: x.argmin(0),
    "argmax_all": lambda x, y: x.argmax(),
    "relu_then_amax": lambda x, y: torch.relu(x * 2).amax(-1),
}

SHAPES = {
    "7x33": (7, 33),
    "5x1000": (5, 1000),
    "4x20001": (4, 20001),
}
"""Rows shorter than a warp's work, rows split across a block's threads, and rows long enough
to be split across threads and (for the full reductions) across blocks; none a multiple of a tile."""


def _positions(shape: tuple[int, int], second: bool) -> dict[tuple[int, int], float]:
    """A few NaN and infinities: at a row's end, its start and its middle, a row with NaN and -inf,
    a row with +inf and NaN, one NaN per row at most in the first rows so that the index of eager's
    first NaN is unambiguous on every device, and a column with only infinities of one sign."""
    rows, columns = shape
    last, middle = columns - 1, columns // 2
    if second:
        return {(0, middle): NAN, (1, 0): -INF, (rows - 1, last): INF}
    return {(1, last): NAN, (2, 0): INF, (2, middle): -INF, (3, 1): NAN, (3, last): -INF,
            (4 % rows, middle + 1): INF, (4 % rows, 2): NAN, (rows - 1, 3): -INF}


def _inputs(shape, dtype, device):
    x = planted(shape, dtype, _positions(shape, False), seed=1, device=device)
    y = planted(shape, dtype, _positions(shape, True), seed=2, device=device)
    return x, y


def _check(name: str, shape: tuple[int, int], dtype: torch.dtype, device: str) -> None:
    fn = PROGRAMS[name]
    x, y = _inputs(shape, dtype, device)
    got, want = lamina.compile(fn, (x, y))(x, y), fn(x, y)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same_nonfinite(g, w, rtol=0, atol=0)


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("name", PROGRAMS)
def test_nan_and_infinities_as_eager_on_the_simulator(name, shape, dtype):
    _check(name, shape, dtype, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("name", PROGRAMS)
def test_nan_and_infinities_as_eager_on_the_gpu(name, shape, dtype):
    _check(name, shape, dtype, "cuda")


def test_a_row_of_nan_only_and_a_row_of_minus_infinity_only():
    """The reductions' identities (-inf for max) meet rows that hold nothing else."""
    x = torch.randn(4, 37)
    x[1] = NAN
    x[2] = -INF
    fn = lambda x: (x.amax(-1), x.argmax(-1), x.amin(-1), x.argmin(-1))  # noqa: E731
    for g, w in zip(lamina.compile(fn, (x,))(x), fn(x)):
        assert_same_nonfinite(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
def test_the_cuda_text_keeps_nan_through_max_and_min_and_compiles(dtype, arch, tmp_path):
    """The GPU computes what the simulator does: no ``fmax``/``fmin`` (which drop a NaN operand)
    anywhere, ``lamina_max``/``lamina_min`` instead, and NVRTC compiles them."""
    from lamina.backends.cuda import compile_kernel, emit_cuda, kernel_symbol

    x = torch.randn(4, 2001, dtype=dtype)
    fn = lambda x: (torch.relu(x).amax(-1), x.clamp(-1, 1), x.argmin(-1))  # noqa: E731
    kernels = lamina.Compiler(target=arch).compile(fn, (x,)).compilation.kernels.kernels
    sources = [emit_cuda(k) for k in kernels]
    assert not any(name in s for s in sources for name in ("fmax", "fmin"))
    assert any("lamina_max(" in s for s in sources) and any("lamina_min(" in s for s in sources)
    for kernel, source in zip(kernels, sources):
        compile_kernel(source, kernel_symbol(kernel), arch, cache_dir=tmp_path)

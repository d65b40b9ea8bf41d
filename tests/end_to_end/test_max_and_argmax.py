"""``max(dim)``, ``argmax`` and ``argmin`` compiled whole and run on the simulator: the
values as eager's, the indices exactly (int64, the first on ties, the first NaN's)."""

import pytest
import torch

import lamina

def min_keepdim_then_arithmetic(x):
    smallest = x.min(0, keepdim=True)
    return smallest.values * 2 + 1, smallest.indices + 1


PROGRAMS = {
    "max_values": lambda x: x.max(1).values,
    "max_values_and_indices": lambda x: tuple(x.max(1)),
    "argmax_last_dim": lambda x: x.argmax(-1),
    "argmin_flattened": lambda x: x.argmin(),
    "min_keepdim_then_arithmetic": min_keepdim_then_arithmetic,
}


def _ties(dtype=torch.float32):
    """Multiples of 0.5 in [-2, 2]: every row of 33 repeats its extreme values."""
    return (torch.randint(-4, 5, (7, 33)) / 2).to(dtype)


def _assert_same(got, want):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=["f32", "bf16", "i32"])
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_matches_eager_on_the_simulator(name, dtype):
    fn, x = PROGRAMS[name], _ties(dtype) if dtype.is_floating_point else torch.randint(-3, 4, (7, 33), dtype=dtype)
    _assert_same(lamina.compile(fn, (x,))(x), fn(x))


@pytest.mark.parametrize("name", PROGRAMS)
def test_nan_wins_and_its_first_index_is_returned(name):
    x = _ties()
    x[1, 3] = x[1, 20] = x[4, 0] = float("nan")
    fn = PROGRAMS[name]
    _assert_same(lamina.compile(fn, (x,))(x), fn(x))


def test_torch_compile_backend_runs_max_dim_and_argmax():
    def fn(x):
        values, indices = x.max(1)
        return values * 2, indices, x.argmax(-1), x.argmin()

    x = _ties()
    _assert_same(torch.compile(fn, backend="lamina")(x), fn(x))

"""Deterministic stand-ins for the GPU clock and for torch.compile, so the bench runs on the CPU."""

from lamina.bench.runner import SAME_SIZE_COPY
from lamina.bench.suite import make_case
from lamina.program_spec import parse_input

HOT_US = {"lamina": 10.0, "eager": 40.0, "torch.compile": 20.0}
COLD_US = {"lamina": 12.0, "eager": 48.0, "torch.compile": 12.0}
COPY_COLD_US = 15.0


class FakeTimer:
    """Fixed microseconds per contender; records every call and runs the timed function once."""

    def __init__(self):
        self.calls = []

    def __call__(self, contender, figure, fn, inputs, calls):
        self.calls.append((contender, figure, calls))
        fn(*inputs)
        if contender == SAME_SIZE_COPY:
            return COPY_COLD_US
        return (HOT_US if figure == "hot" else COLD_US)[contender]


def no_torch_compile(fn, dynamic):
    assert dynamic is False
    return fn


def tiny_cases():
    """Small versions of suite kernels: quick on the simulator, with sizes that are not multiples of tiles."""
    return [
        make_case("tiny.rmsnorm", "x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-06) * w",
                  (parse_input("x=3,40"), parse_input("w=40")), 4 * 3 * 40),
        make_case("tiny.linear_qkv", "F.linear(x, w, b)",
                  (parse_input("x=3,16"), parse_input("w=24,16"), parse_input("b=24")), 2 * 3 * 24 * 16 + 3 * 24),
    ]

"""Launching compiled kernels on a GPU, compared with eager PyTorch."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from lamina.backends.cuda import CudaBackend, LaunchableKernel, compile_kernel, device_arch, emit_cuda, kernel_symbol
from lamina.backends.cuda.codegen import uses_dynamic_shared
from lamina.backends.cuda.headers import include_dirs
from lamina.backends.cuda.plugin import SM90
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, loop_ir
from lamina.core.ir.torch_ir import TensorType
from lamina.plugins.kernel_passes import OverlapWithPreviousKernel
from tests.backends.cuda import kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is visible to PyTorch"),
]


def launchable(kernel, cache_dir) -> LaunchableKernel:
    compiled = compile_kernel(emit_cuda(kernel), kernel_symbol(kernel), device_arch(), cache_dir=cache_dir)
    return LaunchableKernel(kernel, compiled)


def elementwise_reference(x, w):
    return torch.where(x > 0, x * w + 0.5, torch.sigmoid(x)) * torch.exp(-w.abs())


def poisoned(n, dtype=torch.float32):
    return torch.full((n,), float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("n", [1000, 4096 + 3])
def test_elementwise_kernel_matches_torch(tmp_path, n):
    x, w, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), poisoned(n)
    launchable(kernels.elementwise(n), tmp_path)({"x": x, "w": w, "y": y})
    torch.testing.assert_close(y, elementwise_reference(x, w))


@pytest.mark.parametrize("m, n, k", [(37, 29, 45), (64, 48, 32), (5, 70, 17)])
def test_shared_memory_matmul_matches_torch(tmp_path, m, n, k):
    a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    bias = torch.randint(-5, 6, (n,), device="cuda", dtype=torch.int32)
    c = poisoned(m * n)
    launchable(kernels.tiled_matmul(m, n, k), tmp_path)({"a": a.reshape(-1), "b": b.reshape(-1), "bias": bias, "c": c})
    expected = (a.double() @ b.double() + bias.double()).float()
    torch.testing.assert_close(c.reshape(m, n), expected, rtol=1e-4, atol=1e-4)


def test_kernel_with_more_than_48_kib_of_shared_memory(tmp_path):
    kernel = kernels.reverse_blocks(blocks=3, per_block=16384)
    assert uses_dynamic_shared(kernel)
    x, y = torch.randn(3 * 16384, device="cuda"), poisoned(3 * 16384)
    launchable(kernel, tmp_path)({"x": x, "y": y})
    torch.testing.assert_close(y, x.reshape(3, -1).flip(1).reshape(-1))


def test_multi_dimensional_shared_array_in_dynamic_shared_memory(tmp_path):
    kernel = kernels.staged_transpose(tiles=4, size=64)
    assert uses_dynamic_shared(kernel)
    x, y = torch.randn(4 * 64 * 64, device="cuda"), poisoned(4 * 64 * 64)
    launchable(kernel, tmp_path)({"x": x, "y": y})
    torch.testing.assert_close(y, x.reshape(4, 64, 64).transpose(1, 2).reshape(-1))


def test_launch_under_cuda_graph_capture_and_replay(tmp_path):
    n = 3000
    kernel = launchable(kernels.elementwise(n), tmp_path)
    kernel.prepare()
    x, w, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), poisoned(n)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel({"x": x, "w": w, "y": y})
    for _ in range(3):
        x.copy_(torch.randn(n, device="cuda"))
        w.copy_(torch.randn(n, device="cuda"))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, elementwise_reference(x, w))


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0),
                    reason="kernels overlap the previous one from Hopper on")
def test_kernels_that_overlap_the_previous_one_read_what_it_wrote(tmp_path):
    """A chain of launches, each reading the previous one's output backwards while its own
    launch overlaps that kernel, directly and replayed from a CUDA graph: its first blocks read
    what the other kernel's last blocks write, and the poisoned buffers show any early read.
    Without the wait, 3 replays of 20 read early (``experiments/dependent_launch/``)."""
    n = (1 << 22) + 3
    kernel = launchable(OverlapWithPreviousKernel().apply(kernels.reversed_halves(n), SM90), tmp_path)
    kernel.prepare()
    x = torch.randn(n, device="cuda")
    chain = [poisoned(n) for _ in range(6)]

    def run():
        for source, result in zip([x, *chain], chain):
            kernel({"x": source, "y": result})

    def expected():
        value = x.double()
        for _ in chain:
            value = value.flip(0) * 0.5 + 1
        return value.float()

    run()
    torch.testing.assert_close(chain[-1], expected())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(20):
        x.copy_(torch.randn(n, device="cuda"))
        for result in chain:
            result.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(chain[-1], expected())


def test_launch_from_another_thread(tmp_path):
    n = 777
    kernel = launchable(kernels.elementwise(n), tmp_path)
    x, w, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), poisoned(n)
    errors = []

    def run():
        try:
            kernel({"x": x, "w": w, "y": y})
            torch.cuda.synchronize()
        except Exception as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert not errors
    torch.testing.assert_close(y, elementwise_reference(x, w))


@pytest.mark.skipif(include_dirs(("cuda_bf16.h",)) is None, reason="no CUDA headers for bfloat16")
def test_bfloat16_kernel(tmp_path):
    n = 1000
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = poisoned(n, torch.bfloat16)
    launchable(kernels.elementwise(n, dtype=dtypes.bfloat16), tmp_path)({"x": x, "w": w, "y": y})
    torch.testing.assert_close(y.float(), elementwise_reference(x.float(), w.float()), rtol=3e-2, atol=3e-2)


def test_backend_runs_a_program(tmp_path):
    n = 1500
    flat = TensorType((n,), dtypes.float32)
    loop = loop_ir.Program(
        inputs=[loop_ir.Buffer("x", flat), loop_ir.Buffer("w", flat)],
        outputs=[loop_ir.Buffer("y", flat)], temporaries=[], kernels=[],
    )
    program = kernels.kir.Program([kernels.elementwise(n)])
    compilation = SimpleNamespace(loop=loop, kernels=program, target=SM90)
    backend = CudaBackend(cache_dir=tmp_path)
    assert backend.available() is None
    runner = backend.load(compilation, SM90)
    x, w = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    (y,) = runner(x, w)
    torch.testing.assert_close(y, elementwise_reference(x, w))


@pytest.mark.parametrize("x, message", [
    (torch.randn(64), "parameter x is on cpu"),
    (None, "without a tensor for its parameter x"),
    ("float64", "takes x as float32, but got a torch.float64 tensor"),
    ("short", "reads 64 contiguous elements of x, but got a tensor of shape"),
])
def test_launch_with_the_wrong_tensor_is_an_error(tmp_path, x, message):
    n = 64
    kernel = launchable(kernels.elementwise(n), tmp_path)
    if isinstance(x, str):
        x = torch.randn(n, device="cuda", dtype=torch.float64) if x == "float64" else torch.randn(n - 1, device="cuda")
    buffers = {"x": x, "w": torch.randn(n, device="cuda"), "y": poisoned(n)}
    with pytest.raises(LaminaError, match=message):
        kernel({name: t for name, t in buffers.items() if t is not None})

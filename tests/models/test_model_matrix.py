"""Every architecture of the model matrix, scaled down, through both entry points, on the simulator.

Each model is called as its users call it, ``model(**inputs)`` with a batch of two (BERT's
padded), its KV cache on where it has one, and every tensor it returns (logits or hidden
states, and each layer's cached keys and values) is compared with eager PyTorch in float64
on the same weights. The first length of each architecture is a multiple of no tile size.
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.bench.measure import relative_error
from lamina.frontends.torch.containers import register_library_containers
from lamina.models.architectures import ARCHITECTURES, ENTRY_POINTS, build, example_inputs, main_output
from lamina.models.measure import eager_at
CASES = [(name, entry, length) for name, arch in ARCHITECTURES.items()
         for length in arch.small_lengths for entry in ENTRY_POINTS]


class MatrixCase:
    """One scaled-down model compiled through one entry point and called once."""

    def __init__(self, name: str, entry: str, length: int, seed: int):
        self.arch = ARCHITECTURES[name]
        self.entry, self.length, self.seed = entry, length, seed
        self.model = build(self.arch, size="small", length=length, seed=seed)
        register_library_containers()  # to flatten the returned caches below, whichever entry point runs first
        self.inputs = example_inputs(self.arch, self.model, batch=2, length=length, seed=seed)
        torch._dynamo.reset()
        if entry == "lamina.compile":
            self.compiled = lamina.compile(self.model, example_kwargs=self.inputs)
        else:
            self.compiled = torch.compile(self.model, backend="lamina")
        with torch.no_grad():
            self.outputs = self.compiled(**self.inputs)

    def __repr__(self) -> str:
        return f"{self.arch.name} through {self.entry} at length {self.length}, seed {self.seed}"


@pytest.fixture(scope="module")
def matrix_case(seed):
    cache: dict[tuple, MatrixCase] = {}

    def get(name: str, entry: str, length: int) -> MatrixCase:
        if (name, entry, length) not in cache:
            cache[name, entry, length] = MatrixCase(name, entry, length, seed)
        return cache[name, entry, length]

    return get


@pytest.mark.parametrize("name,entry,length", CASES, ids=[f"{n}-{e}-{l}" for n, e, l in CASES])
def test_every_output_matches_eager_in_float64(matrix_case, name, entry, length):
    case = matrix_case(name, entry, length)
    reference = eager_at(case.model, case.inputs, torch.float64)
    assert type(case.outputs) is type(reference), case
    leaves, structure = pytree.tree_flatten(case.outputs)
    expected, expected_structure = pytree.tree_flatten(reference)
    assert structure == expected_structure, f"{case}: returned {structure}, eager returns {expected_structure}"
    for k, (out, ref) in enumerate(zip(leaves, expected)):
        assert out.dtype == torch.float32 or not out.is_floating_point(), f"{case}: output {k} is {out.dtype}"
        error = relative_error(out, ref)
        assert error < 1e-4, f"{case}: output {k} of shape {list(ref.shape)} is off by {error:.2e}"


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_kernel_compiles_with_nvrtc_for_sm_90(matrix_case, name):
    arch = ARCHITECTURES[name]
    compilation = matrix_case(name, "lamina.compile", arch.small_lengths[0]).compiled.compilation
    compiled = CudaBackend().compile(compilation.kernels, "sm_90")
    assert set(compiled) == {k.name for k in compilation.kernels.kernels}
    assert all(k.cubin for k in compiled.values())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_architecture_matches_eager_on_the_gpu_through_torch_compile(seed, name, dtype):
    """On CUDA, where PyTorch's fused attention kernels reach the backend. float32 against eager float64;
    bfloat16 against eager float32 on the same weights, at most 1.25x as far as eager bfloat16 is (PERFORMANCE.md)."""
    arch = ARCHITECTURES[name]
    length = arch.small_lengths[0]
    model = build(arch, size="small", length=length, dtype=dtype, device="cuda", seed=seed)
    inputs = example_inputs(arch, model, batch=2, length=length, device="cuda", seed=seed)
    torch._dynamo.reset()
    with torch.no_grad():
        out = main_output(torch.compile(model, backend="lamina")(**inputs))
        eager = main_output(model(**inputs))
    reference = main_output(eager_at(model, inputs, torch.float64 if dtype == torch.float32 else torch.float32))
    error, eager_error = relative_error(out, reference), relative_error(eager, reference)
    where = f"{name} in {dtype}, seed {seed}: relative error {error:.2e} (eager's {eager_error:.2e})"
    assert out.dtype == dtype, where
    assert error < 1e-4 if dtype == torch.float32 else error <= 1.25 * eager_error, where

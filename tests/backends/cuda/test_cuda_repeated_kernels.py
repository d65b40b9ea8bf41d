"""Kernels that differ only in names, like the layers of a model, compile once."""

import attrs
import pytest
import torch

import lamina
from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.kernel_sources import shared_name
from lamina.core.errors import CompileError
from lamina.core.ir import expr as ex, kernel_ir


def two_layers(x, w1, y, w2):
    return torch.relu(x @ w1), torch.relu(y @ w2)


def test_structurally_equal_kernels_share_one_cubin(tmp_path):
    inputs = tuple(torch.randn(32, 32) for _ in range(4))
    program = lamina.compile(two_layers, inputs).compilation.kernels
    assert len(program.kernels) == 2 and program.kernels[0].name != program.kernels[1].name
    compiled = CudaBackend(cache_dir=tmp_path).compile(program, "sm_90")
    first, second = (compiled[k.name] for k in program.kernels)
    assert first is second
    assert first.spill_stores == 0 and first.registers > 0


def test_a_shared_kernel_is_named_for_a_profiler_after_what_it_computes():
    """A profiler shows the ``__global__`` name: the first kernel's, less the numbers that tell
    the layers apart, so that the layers' launches add up on one line."""
    inputs = tuple(torch.randn(32, 32) for _ in range(4))
    program = lamina.compile(two_layers, inputs).compilation.kernels
    assert [k.name for k in program.kernels] == ["relu", "relu_1"]
    assert [shared_name(k) for k in program.kernels] == ["relu", "relu"]
    assert shared_name(attrs.evolve(program.kernels[0], name="linear_12_sum")) == "linear_sum"
    assert shared_name(attrs.evolve(program.kernels[0], name="_to_copy_8")) == "_to_copy"


def test_kernels_of_different_code_under_one_name_are_told_apart(tmp_path):
    def different_layers(x, w1, y, w2):
        return torch.relu(x @ w1), torch.relu(y @ w2 + 1)

    inputs = tuple(torch.randn(32, 32) for _ in range(4))
    program = lamina.compile(different_layers, inputs).compilation.kernels
    assert [shared_name(k) for k in program.kernels] == ["relu", "relu"]
    compiled = CudaBackend(cache_dir=tmp_path).compile(program, "sm_90")
    assert [compiled[k.name].name for k in program.kernels] == ["relu", "relu_2"]


def test_a_compile_error_names_the_real_kernel(tmp_path):
    inputs = tuple(torch.randn(8, 8) for _ in range(4))
    program = lamina.compile(two_layers, inputs).compilation.kernels
    kernel = program.kernels[0]
    output = kernel.params[-1]
    float_remainder = ex.Op("mod", (ex.const(1.5), ex.const(2.5)), output.dtype)
    broken = attrs.evolve(kernel, body=kernel.body + (kernel_ir.Store(output.name, (ex.const(0),), float_remainder),))
    with pytest.raises(CompileError, match=f"kernel {kernel.name}") as error:
        CudaBackend(cache_dir=tmp_path).compile(kernel_ir.Program([broken]), "sm_90")
    assert f"{output.name}[0] = 1.5f % 2.5f" in str(error.value)


def test_positional_names_never_take_an_index_variable_s_name(tmp_path):
    """Values that are also returned (a key-value cache), at a length the attention kernel does not
    read them in place at (70 keys), are copied with the positions last for its second product.
    Written by the pointwise schedule, that copy runs over index ``r0`` and keeps its vectors in a
    register array, which must not be renamed ``r0`` too."""
    def attention_and_values(qkv):
        q, k, v = (t.view(1, 70, 2, 64).transpose(1, 2) for t in qkv.split(128, dim=-1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), v

    qkv = torch.randn(1, 70, 384, dtype=torch.bfloat16)
    compiled = lamina.compile(attention_and_values, (qkv,), target="sm_90",
                              disable=("lamina.builtin.schedules.transpose",))
    copy = next(k for k in compiled.compilation.kernels.kernels if k.name.endswith("_k_major"))
    assert any(a.space == "register" for a in copy.arrays)
    assert "int r0 = " in compiled.ir("cuda")
    CudaBackend(cache_dir=tmp_path).compile(compiled.compilation.kernels, "sm_90")

import pytest
import torch

from lamina.bench.suite import (DTYPES, MODELS, SEQUENCE_LENGTHS, builtin_suite, check_unique, load_suite_file,
                                make_case)
from lamina.core.errors import LaminaError
from lamina.program_spec import parse_input

KERNELS = ("rmsnorm", "add_rmsnorm", "silu_mul", "rope_q", "scores", "scores_causal",
           "linear_qkv", "linear_o", "linear_gate_up", "linear_down", "gated_mlp")


@pytest.fixture(scope="module")
def suite():
    return {c.name: c for c in builtin_suite()}


def test_names_are_unique(suite):
    assert len(suite) == len(builtin_suite())
    check_unique(list(suite.values()))


def test_duplicate_names_are_refused(suite):
    case = suite["running_example.fp32"]
    with pytest.raises(LaminaError, match="two bench cases are named 'running_example.fp32'"):
        check_unique([case, case])


def test_every_kernel_of_both_models_at_every_length_and_dtype(suite):
    for model in MODELS:
        for s in SEQUENCE_LENGTHS:
            for short in ("fp32", "bf16", "fp16"):
                for kernel in KERNELS:
                    name = f"{model.name}.{kernel}.s{s}.{short}"
                    if kernel == "scores_causal" and s == 1:
                        assert name not in suite  # one query: the mask hides nothing
                    else:
                        assert name in suite, name
    assert {"running_example.fp32", "running_example.bf16", "running_example.fp16"} <= set(suite)


def test_dtypes_of_inputs_follow_the_name(suite):
    for case in suite.values():
        expected = {"bf16": DTYPES["bfloat16"], "fp16": DTYPES["float16"], "fp32": DTYPES["float32"]}[
            case.name.rsplit(".", 1)[1]]
        assert all(i.dtype == expected for i in case.inputs), case.name


def test_qwen_rmsnorm_bytes_and_flops_by_hand(suite):
    case = suite["qwen.rmsnorm.s2048.fp32"]
    # x read (2048 x 3584), w read (3584), out written (2048 x 3584), 4 bytes each
    assert case.bytes_moved == (2048 * 3584 + 3584 + 2048 * 3584) * 4 == 58_734_592
    assert case.flops == 4 * 2048 * 3584
    assert case.memory_bound
    assert suite["qwen.rmsnorm.s2048.bf16"].bytes_moved == 58_734_592 // 2


def test_qwen_qkv_projection_bytes_and_flops_by_hand(suite):
    case = suite["qwen.linear_qkv.s128.fp32"]
    n = 3584 + 2 * 4 * 128  # q, then k and v of 4 KV heads of 128
    assert [tuple(i.shape) for i in case.inputs] == [(128, 3584), (n, 3584), (n,)]
    assert case.bytes_moved == (128 * 3584 + n * 3584 + n + 128 * n) * 4
    assert case.flops == 2 * 128 * n * 3584 + 128 * n
    assert not suite["tinyllama.linear_qkv.s128.fp32"].expression.endswith("b)")  # TinyLlama has no bias


def test_the_gated_mlp_reads_both_weights_and_counts_both_products(suite):
    case = suite["tinyllama.gated_mlp.s128.bf16"]
    assert [tuple(i.shape) for i in case.inputs] == [(128, 2048), (5632, 2048), (5632, 2048)]
    assert case.flops == 2 * (2 * 128 * 2048 * 5632) + 5 * 128 * 5632


def test_attention_scores_bytes_flops_and_bound(suite):
    case = suite["tinyllama.scores_causal.s2048.fp32"]
    assert case.bytes_moved == (2 * 32 * 2048 * 64 + 32 * 2048 * 2048) * 4
    assert case.flops == 32 * 2048 * 2048 * (2 * 64 + 4)
    assert not case.memory_bound
    assert suite["tinyllama.linear_down.s1.fp32"].memory_bound  # decode: the weights dominate


def test_running_example_matches_design(suite):
    case = suite["running_example.fp32"]
    assert case.expression == "torch.relu(torch.matmul(x + bias, w))"
    assert case.bytes_moved == (16 * 64 + 64 + 64 * 16 + 16 * 16) * 4


def test_suite_file_adds_cases(tmp_path):
    path = tmp_path / "extra.toml"
    path.write_text('[[case]]\nname = "my.gelu"\nexpression = "F.gelu(x) * y"\n'
                    'inputs = ["x=4,8", "y=4,8:float32"]\n\n'
                    '[[case]]\nname = "my.sum"\nexpression = "x.sum(-1)"\ninputs = ["x=4,8:bfloat16"]\nflops = 32\n')
    gelu, total = load_suite_file(path)
    assert gelu.name == "my.gelu" and gelu.flops == 32 and gelu.bytes_moved == 3 * 32 * 4
    assert total.dtype == torch.bfloat16 and total.flops == 32 and total.bytes_moved == (32 + 4) * 2


@pytest.mark.parametrize("text, message", [
    ('[[case]]\nname = "a"\nexpression = "x"\n', "case 1 lacks inputs"),
    ('[[case]]\nname = "a"\nexpression = "x"\ninputs = ["x=2"]\nflop = 3\n', "unknown key"),
    ("name = 'a'\n", r"add at least one \[\[case\]\]"),
    ("[[case]\n", "not valid TOML"),
    ('[[case]]\nname = "a"\nexpression = "x @ y"\ninputs = ["x=2,3", "y=2,3"]\n', "fails on its inputs"),
])
def test_suite_file_errors_say_what_to_fix(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(LaminaError, match=message):
        load_suite_file(path)


def test_make_case_default_flops_is_one_per_output_element():
    case = make_case("t", "x.sum(0)", (parse_input("x=5,7"),))
    assert case.flops == 7 and case.bytes_moved == (35 + 7) * 4


def test_whole_attention_cases_of_both_models(suite):
    from lamina.bench.suite import ATTENTION_LENGTHS, DECODE_CACHE_LENGTHS
    for model in MODELS:
        for short in ("bf16", "fp32"):
            for s in ATTENTION_LENGTHS:
                assert f"{model.name}.attention.s{s}.{short}" in suite
                assert f"{model.name}.attention_causal.s{s}.{short}" in suite
            for cached in DECODE_CACHE_LENGTHS:
                assert f"{model.name}.attention_decode.c{cached}.{short}" in suite
    case = suite["qwen.attention_causal.s2048.bf16"]
    # q: 28 heads, k and v: 4 heads, of 2048 x 128; the output as q
    assert case.bytes_moved == (2 * 28 + 2 * 4) * 2048 * 128 * 2
    assert case.flops == 4 * 28 * 2048 * 2048 * 128 // 2
    decode = suite["tinyllama.attention_decode.c4096.bf16"]
    assert decode.inputs[0].shape == (1, 32, 1, 64) and decode.inputs[1].shape == (1, 4, 4096, 64)

"""``lamina run --model M --generate N``, as a user runs it, on a scaled-down configuration."""

import pytest
import torch

from lamina.cli.main import main
from lamina.models import MODELS, scaled_down
from lamina.models.generation import Generated, first_divergence


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny_llama(monkeypatch) -> str:
    config = scaled_down(MODELS["tinyllama"])
    monkeypatch.setitem(MODELS, config.name, config)
    return config.name


def test_generate_on_the_simulator_reports_times_compiles_and_tokens(capsys, tiny_llama):
    code, out, err = run(capsys, "run", "--model", tiny_llama, "--device", "cpu", "--generate", "5", "--prompt", "11")
    assert code == 0, err
    assert "5 tokens after a random prompt of 11 (batch 1): greedy, static cache" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["lamina"][-1] == "2", out  # the prompt's step and the decoding step
    assert lines["eager"][-1] == "-"
    assert "torch.compile" not in lines
    assert "5 tokens are eager's" in out, out


def test_generate_with_the_default_cache_compiles_the_growing_step_once(capsys, tiny_llama):
    code, out, err = run(capsys, "run", "--model", tiny_llama, "--device", "cpu", "--generate", "6", "--prompt", "11",
                         "--cache", "dynamic")
    assert code == 0, err
    assert "6 tokens after a random prompt of 11 (batch 1): greedy, dynamic cache" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["lamina"][-1] == "3", out  # the prompt, the first step, and every later step at once
    assert "6 tokens are eager's" in out, out


@pytest.mark.parametrize("argv,message", [
    (["--generate", "4", "--seq", "8"], "--generate takes the prompt's length as --prompt, not --seq"),
    (["--generate", "0"], "--generate and --batch take 1 or more, not 0"),
    (["--generate", "4", "--batch", "0"], "--generate and --batch take 1 or more, not 0"),
    (["--generate", "200", "--prompt", "100"], "takes 1 to 256 positions; --prompt 100 and --generate 200 feed it 299"),
    (["--prompt", "8"], "--prompt, --batch and --cache are for --generate N"),
    (["--cache", "dynamic"], "--prompt, --batch and --cache are for --generate N"),
])
def test_bad_generate_arguments_are_one_clear_message(capsys, tiny_llama, argv, message):
    code, out, err = run(capsys, "run", "--model", tiny_llama, "--device", "cpu", *argv)
    assert code == 2
    assert message in err, err
    assert "Traceback" not in err


def test_generating_with_a_full_size_model_on_the_simulator_is_refused(capsys):
    code, out, err = run(capsys, "run", "--model", "tinyllama", "--device", "cpu", "--generate", "256")
    assert code == 2
    assert "generating 256 tokens after 128 with 22 layer(s) of tinyllama" in err and "--layers 1" in err
    assert "Traceback" not in err


def test_generate_without_a_model_is_refused(capsys):
    code, out, err = run(capsys, "run", "--device", "cpu", "--generate", "4")
    assert code == 2
    assert "--generate can only be used with --model" in err


def generated(name: str, tokens: list[list[int]], logits: torch.Tensor) -> Generated:
    return Generated(name=name, tokens=torch.tensor(tokens), logits=logits, first_call_s=1.0, first_token_s=0.5,
                     decode_s=2.0)


def test_the_first_divergence_names_the_token_and_the_logits_there(seed):
    torch.manual_seed(seed)
    logits = torch.randn(4, 2, 10)
    expected = generated("eager", [[1, 2, 3, 4], [5, 6, 7, 8]], logits)
    ours = logits.clone()
    ours[2, 1, 9] += 0.25
    got = generated("lamina", [[1, 2, 3, 4], [5, 6, 9, 0]], ours)
    divergence = first_divergence(got, expected)
    assert (divergence.step, divergence.row, divergence.token, divergence.expected_token) == (2, 1, 9, 7)
    assert divergence.logits_difference == pytest.approx(0.25)
    assert divergence.expected_margin == pytest.approx(float(logits[2, 1, 7] - logits[2, 1, 9]))
    assert "first differ at new token 3 of sequence 1: lamina 9, eager 7" in divergence.describe("lamina", "eager")
    assert first_divergence(expected, expected) is None
    assert got.tokens_per_second == pytest.approx(2 * 3 / 2.0)


@pytest.mark.gpu
def test_generate_on_the_gpu_compares_with_eager_and_torch_compile(capsys, tiny_llama):
    code, out, err = run(capsys, "run", "--model", tiny_llama, "--device", "cuda", "--generate", "6", "--prompt", "13",
                         "--dtype", "bfloat16", "--batch", "2")
    assert code == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert lines["lamina"][-1] == "2", out
    assert "torch.compile" in lines
    assert "tokens " in out

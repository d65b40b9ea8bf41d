"""``lamina run --model``, as a user runs it, on a scaled-down configuration put in the registry."""

import pytest
import torch

from lamina.cli.main import main
from lamina.models import MODELS, scaled_down


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny_qwen(monkeypatch) -> str:
    config = scaled_down(MODELS["qwen2.5-7b"])
    monkeypatch.setitem(MODELS, config.name, config)
    return config.name


def test_run_model_on_the_simulator_reports_kernels_and_error(capsys, tiny_qwen, seed):
    code, out, err = run(capsys, "run", "--model", tiny_qwen, "--device", "cpu", "--layers", "1", "--seq", "13",
                         "--seed", str(seed))
    assert code == 0, err
    assert "q/k/v biases" in out
    assert "1 of 2 layers" in out and "input ids (1, 13)" in out
    assert "per decoder layer" in out and "(count with 1 layer - count with 0 layers) / 1" in out
    assert "not measured on the CPU" in out
    assert "relative to eager PyTorch in float64 (ok, tolerance 1e-04)" in out, out


def test_a_full_size_model_is_refused_on_the_simulator(capsys):
    code, out, err = run(capsys, "run", "--model", "tinyllama", "--device", "cpu")
    assert code == 2
    assert "a forward pass of tinyllama with 22 layer(s) at 128 tokens is" in err and "--layers 1" in err and "GPU" in err
    assert "Traceback" not in err


class Built(Exception):
    """Stands in for building a full-size model, which the test does not need."""


def test_a_slice_of_a_full_size_model_is_a_warning(capsys, monkeypatch):
    import lamina.cli.run_model as run_model

    def build(config, **settings):
        raise Built(settings)

    monkeypatch.setattr(run_model, "build_model", build)
    with pytest.raises(Built) as built:
        main(["run", "--model", "tinyllama", "--device", "cpu", "--layers", "1", "--seq", "8"])
    assert "a forward pass of tinyllama with 1 layer(s) at 8 tokens is 1.8e+09 FLOPs, about 88 seconds on the Kernel IR simulator" in capsys.readouterr().err
    assert built.value.args[0]["num_layers"] == 1 and built.value.args[0]["dtype"] == torch.float32


@pytest.mark.parametrize("argv,message", [
    (["--model", "tinyllama", "--layers", "0"], "--layers 0: tinyllama has 1 to 22 decoder layers"),
    (["--model", "qwen2.5-7b", "--layers", "29"], "--layers 29: qwen2.5-7b has 1 to 28 decoder layers"),
    (["--model", "tinyllama", "--layers", "1", "--seq", "4096"], "tinyllama takes at most 2048 positions"),
    (["--model", "tinyllama", "--layers", "1", "--seq", "0"], "at least 1"),
    (["--model", "tinyllama", "-c", "x + 1", "--input", "x=3"], "leave out -c and --input"),
    (["--seq", "16"], "--seq can only be used with --model"),
    (["--layers", "2", "--dtype", "bfloat16"], "--layers, --dtype can only be used with --model"),
])
def test_bad_model_arguments_are_one_clear_message(capsys, argv, message):
    code, out, err = run(capsys, "run", "--device", "cpu", *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_missing_transformers_says_how_to_install_it(capsys, monkeypatch, tiny_qwen):
    import lamina.models.builder as builder

    def no_transformers(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(builder.importlib, "import_module", no_transformers)
    code, out, err = run(capsys, "run", "--model", tiny_qwen, "--device", "cpu")
    assert code == 2
    assert 'pip install "lamina[models]"' in err
    assert "Traceback" not in err


def test_unknown_model_lists_the_shipped_ones(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--model", "gpt-5"])
    err = capsys.readouterr().err
    assert "qwen2.5-7b" in err and "tinyllama" in err


@pytest.mark.gpu
def test_run_model_on_the_gpu_compares_with_eager_and_torch_compile(capsys, tiny_qwen):
    code, out, err = run(capsys, "run", "--model", tiny_qwen, "--device", "cuda", "--seq", "13", "--dtype", "bfloat16")
    assert code == 0, err
    assert "relative to eager PyTorch in bfloat16 (ok, tolerance 2e-02)" in out, out
    assert "relative to eager PyTorch in float32, where eager PyTorch in bfloat16 has " in out
    assert "lamina's forward pass" in out and "GiB" in out
    assert "x lamina's time" in out
    assert "torch.compile: " in out and "per decoder layer" in out

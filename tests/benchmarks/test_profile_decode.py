"""benchmarks/profile_decode.py: a decoding step of model.generate, kernel by kernel."""

import json

import pytest
import torch

import profile_decode


@pytest.mark.gpu
def test_a_decoding_step_is_profiled_kernel_by_kernel(tmp_path):
    out = tmp_path / "decode.json"
    argv = ["--model", "tinyllama", "--layers", "1", "--short", "2", "--long", "6", "--no-inductor", "--out", str(out)]
    assert profile_decode.main(argv) == 0
    record = json.loads(out.read_text())["lamina"]
    assert record["step_ms"] > 0 and record["gpu_us_per_step"] > 0
    assert any(row["kernel"].startswith("index_put") for row in record["kernels"])  # the cache update, a kernel
    assert json.loads(out.read_text())["command"].endswith(f"--out benchmarks/results/{out.name}")


def test_without_a_gpu_it_says_so(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert profile_decode.main(["--model", "tinyllama", "--out", str(tmp_path / "p.json")]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err

"""benchmarks/profile_model.py: GPU time per kernel of a model compiled as its users compile it."""

import json

import pytest
import torch

import profile_model


@pytest.mark.gpu
def test_a_scaled_down_model_is_profiled_kernel_by_kernel_in_lamina_and_torch_compile(tmp_path):
    out = tmp_path / "profile.json"
    argv = ["--arch", "llama", "--size", "small", "--layers", "2", "--length", "13", "--dtype", "bfloat16",
            "--passes", "2", "--out", str(out)]
    assert profile_model.main(argv) == 0
    record = json.loads(out.read_text())
    names = {row["kernel"] for row in record["lamina"]["kernels"]}
    assert record["lamina"]["total_us_per_pass"] > 0 and record["inductor"]["total_us_per_pass"] > 0
    assert "lamina_kernel" not in " ".join(names)  # each kernel named after what it computes
    shared = [row for row in record["lamina"]["kernels"] if row["launches_per_pass"] == 2]
    assert shared, "the two layers' kernels of the same code add up on one line"
    assert record["command"].endswith(f"--out benchmarks/results/{out.name}")


def test_a_kernel_that_starts_before_the_last_ends_counts_only_the_time_it_adds():
    """A dependent launch's blocks start while the kernel before them runs: its wait is not its time."""
    kernels = [("combine", 20.0, 40.0), ("product", 0.0, 30.0), ("norm", 45.0, 50.0), ("inside", 5.0, 10.0)]
    assert profile_model.own_times(kernels) == [("product", 30.0), ("inside", 0.0), ("combine", 10.0), ("norm", 5.0)]
    assert sum(t for _, t in profile_model.own_times(kernels)) == 45.0  # the busy time, gaps left out


def test_without_a_gpu_it_says_so(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert profile_model.main(["--arch", "llama", "--out", str(tmp_path / "p.json")]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err

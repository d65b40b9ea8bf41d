"""The lamina command, as a user runs it."""

import json
import os
import subprocess
import sys

import pytest
import torch

from lamina.cli.main import main

EXAMPLE = ["-c", "torch.relu(torch.matmul(x + bias, w))", "--input", "x=16,64", "--input", "bias=64", "--input", "w=64,16"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_without_arguments_prints_all_six_levels(capsys):
    code, out, err = run(capsys, "compile")
    assert code == 0, err
    for level in ("torch", "tensor", "loop", "tile", "kernel", "cuda"):
        assert f"=== {level} ===" in out
    assert "__global__" in out


def test_compile_expression_prints_the_tile_level(capsys):
    code, out, err = run(capsys, "compile", *EXAMPLE, "--ir", "tile")
    assert code == 0, err
    assert "schedule=contraction" in out
    assert "cp.async" in out


def test_compile_timings_say_where_the_time_went(capsys):
    code, out, err = run(capsys, "compile", "-c", "torch.softmax(x @ w, -1)", "--input", "x=33,40",
                         "--input", "w=40,24", "--ir", "cuda", "--timings")
    assert code == 0, err
    table = out[out.index("stage "):]
    stages = [line.split("  ")[0].strip() for line in table.splitlines()[1:8]]
    assert stages == ["capture", "decomposition", "lowering to loops", "fusion", "scheduling",
                      "lowering to kernels", "CUDA printing"]
    assert "total" in table and "slowest kernels to schedule and lower (of " in table


def test_run_on_the_simulator_compares_with_pytorch(capsys):
    code, out, err = run(capsys, "run", "--device", "cpu")
    assert code == 0, err
    assert "1 kernel(s)" in out
    assert "(ok, tolerance" in out


def test_device_cuda_without_a_gpu_is_a_clear_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    code, out, err = run(capsys, "run", "--device", "cuda")
    assert code == 2
    assert "no CUDA GPU is visible" in err
    assert "Traceback" not in err


def test_unsupported_ops_are_listed_with_the_expression_line(capsys):
    code, out, err = run(capsys, "compile", "-c", "torch.sort(x, 0).values[:2] + torch.topk(x, 2, 0).values", "--input", "x=8,3")
    assert code == 2
    assert "2 unsupported op(s)" in err
    assert "aten.sort.default" in err and "aten.topk.default" in err
    assert "<lamina -c>" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["compile", "-c", "x +", "--input", "x=3"], "is not a Python expression"),
    (["compile", "-c", "x + y", "--input", "x=3"], "name 'y' is not defined"),
    (["compile", "-c", "x * 2"], "needs the shape of each input"),
    (["compile", "-c", "x * 2", "--input", "x=3,a"], "comma-separated integers"),
    (["compile", "-c", "x * 2", "--input", "x=3:float8"], "unknown dtype 'float8'"),
    (["compile", "--schedule", "nonexistent"], "schedule 'nonexistent' is not registered"),
])
def test_bad_input_is_one_clear_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_plugins_json_lists_the_builtins(capsys):
    code, out, err = run(capsys, "plugins", "--json")
    assert code == 0
    plugins = {p["name"]: p for p in json.loads(out)}
    assert plugins["lamina.builtin.schedules.contraction"]["registered"] == [
        ["fusion_rule", "pair_gated_products"], ["fusion_rule", "join_products_of_one_input"],
        ["fusion_rule", "split_contractions_across_blocks"],
        ["fusion_rule", "reorder_tma_operand_axes"],
        ["fusion_rule", "pad_tma_operand_rows"], ["fusion_rule", "store_tma_operands_k_major"],
        ["schedule", "contraction"], ["schedule", "unrolled_reduction"]
    ]
    assert all(p["status"] == "loaded" for name, p in plugins.items() if name != "lamina.contrib.autotune")
    assert plugins["lamina.contrib.autotune"]["status"] == "off"


def test_the_module_runs_as_a_command():
    result = subprocess.run([sys.executable, "-m", "lamina", "compile", "--ir", "loop"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "kernel relu" in result.stdout


def test_the_emitted_cuda_is_the_same_in_every_process():
    """Python seeds its string hashes per process; nothing lamina emits may follow set order.
    A residual add + RMSNorm reads two rows, whose registers were once declared in set order."""
    argv = [sys.executable, "-m", "lamina", "compile", "-c", "(lambda h: h * torch.rsqrt(h.pow(2).mean(-1, "
            "keepdim=True) + 1e-6) * w)(x + r)", "--input", "x=3,256", "--input", "r=3,256", "--input", "w=256",
            "--ir", "cuda"]
    processes = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "PYTHONHASHSEED": seed}) for seed in ("1", "2", "3", "4")]
    outputs = set()
    for process in processes:
        stdout, stderr = process.communicate()
        assert process.returncode == 0, stderr
        outputs.add(stdout)
    assert len(outputs) == 1


def test_models_lists_every_architecture_and_prints_the_readme_table(capsys):
    from lamina.models.architectures import ARCHITECTURES, markdown_table

    assert main(["models"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ARCHITECTURES)
    assert main(["models", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()

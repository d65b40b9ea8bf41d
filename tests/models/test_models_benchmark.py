"""benchmarks/models.py: its arguments, the command it records and the JSON it writes (the timing needs a GPU)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from lamina.models import MODELS, build_model, scaled_down

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "models.py"


@pytest.fixture(scope="module")
def bench():
    if str(SCRIPT.parent) not in sys.path:  # the script imports its helpers beside it, as when it is run
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("models_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_are_the_full_suite(bench):
    args = bench.parse_args(["--out", "x.json"])
    assert args.models == ["tinyllama", "qwen2.5-7b"] and args.dtypes == ["float32", "bfloat16"]
    assert args.seq == (128, 512) and args.replays == 100
    assert args.layers == {"tinyllama": 22, "qwen2.5-7b": 2}
    assert not args.quick and not args.no_torch_compile


def test_quick_mode_is_one_length_and_fewer_replays(bench):
    args = bench.parse_args(["--out", "x.json", "--quick", "--layers", "qwen2.5-7b=28"])
    assert args.seq == (128,) and args.replays == 30
    assert args.layers == {"tinyllama": 22, "qwen2.5-7b": 28}
    assert bench.parse_args(["--out", "x.json", "--quick", "--seq", "512", "--replays", "7"]).seq == (512,)


@pytest.mark.parametrize("argv,message", [
    (["--layers", "qwen2.5-7b=29"], "qwen2.5-7b has 1 to 28 layers"),
    (["--layers", "gpt=2"], "write MODEL=N"),
    (["--seq", "4096"], "--seq 4096 does not fit tinyllama"),
    (["--dtypes", "float64"], "invalid choice"),
])
def test_bad_arguments_stop_before_any_work(bench, capsys, argv, message):
    with pytest.raises(SystemExit):
        bench.parse_args(["--out", "x.json", *argv])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--out", "/somewhere/else/2026-11-29_h200_models.json", "--quick"],
    ["--quick", "--out=/somewhere/else/2026-11-29_h200_models.json"],
])
def test_the_recorded_command_names_the_results_folder(bench, argv):
    command = bench.reproducing_command("models.py", argv, bench.parse_args(argv).out)
    assert command == "python benchmarks/models.py --quick --out benchmarks/results/2026-11-29_h200_models.json"


def test_results_are_written_whole_and_rewritten(bench, tmp_path):
    path = tmp_path / "results" / "run.json"
    bench.write_results(str(path), {"cases": [1]})
    bench.write_results(str(path), {"cases": [1, 2]})
    assert json.loads(path.read_text()) == {"cases": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]


def test_summary_of_a_measured_and_a_failed_case(bench):
    case = {
        "model": "tinyllama", "layers": 22, "dtype": "float32", "seq": 128,
        "correctness": {"relative_error": 3e-7, "eager_relative_error": 2e-7, "relative_error_against_eager": 1e-7,
                        "ok": True},
        "kernels": {"lamina": {"total": 300, "per_layer": 13.0}},
        "compile": {"cold": {"total_s": 40.0}, "warm": {"total_s": 20.0}},
        "memory": {"ratio_above_before": 1.1},
        "forward_us": {"lamina": 2000.0, "eager": 1500.0, "torch.compile": {"error": "RuntimeError: capture"}},
    }
    line = bench.summary(case)
    assert "error 3.00e-07 (eager's 2.00e-07; against eager 1.00e-07; ok)" in line and "kernels 300 (13/layer)" in line
    assert "lamina 2.000 ms" in line and "torch.compile RuntimeError: capture" in line
    case["correctness"]["torch.compile_relative_error_against_eager"] = 4e-7
    assert "against eager 1.00e-07; torch.compile against eager 4.00e-07; ok)" in bench.summary(case)
    failed = {"model": "qwen2.5-7b", "layers": 2, "dtype": "bfloat16", "seq": 512, "failure": "LaminaError: x"}
    assert bench.summary(failed) == "qwen2.5-7b L=2 bfloat16 S=512: FAILED LaminaError: x"


def test_without_a_gpu_it_says_so(bench, capsys, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert bench.main(["--out", str(tmp_path / "x.json")]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_one_case_on_a_scaled_down_model(bench, tmp_path):
    config = scaled_down(MODELS["qwen2.5-7b"])
    model = build_model(config, dtype=torch.bfloat16, device="cuda")
    args = bench.parse_args(["--out", str(tmp_path / "x.json"), "--replays", "10"])
    case = bench.run_case(model, config, 2, "bfloat16", 13, args)
    assert case["correctness"]["ok"], case["correctness"]
    assert all(isinstance(us, float) for us in case["forward_us"].values()), case["forward_us"]
    assert all("per_layer" in counts for counts in case["kernels"].values()), case["kernels"]
    assert case["compile"]["warm"]["total_s"] < case["compile"]["cold"]["total_s"]
    json.dumps(case)

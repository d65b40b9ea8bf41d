import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lamina.bench.suite import builtin_suite
from lamina.cli.bench_command import execute, matches
from lamina.cli.main import build_parser, main

from tests.bench.fakes import FakeTimer, no_torch_compile, tiny_cases

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def listed(capsys, *argv):
    assert main(["bench", "--list", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split()[0] for line in lines[1:-1]], lines[-1]


def test_list_shows_every_case_without_a_gpu(no_gpu, capsys):
    names, total = listed(capsys)
    assert names == [c.name for c in builtin_suite()] and total == f"{len(names)} case(s)"


def test_filter_by_substring_glob_and_dtype(no_gpu, capsys):
    assert listed(capsys, "--filter", "running_example")[0] == ["running_example.fp32", "running_example.bf16",
                                                                 "running_example.fp16"]
    names, _ = listed(capsys, "--filter", "qwen.rmsnorm.*.bf16", "--filter", "tinyllama.rope_q.s1.*")
    assert names == ["tinyllama.rope_q.s1.fp32", "tinyllama.rope_q.s1.bf16", "qwen.rmsnorm.s1.bf16",
                     "qwen.rmsnorm.s128.bf16", "qwen.rmsnorm.s2048.bf16", "tinyllama.rope_q.s1.fp16"]
    names, _ = listed(capsys, "--filter", "scores_causal", "--dtype", "float32")
    assert len(names) == 4 and all(n.endswith(".fp32") for n in names)
    assert matches("qwen.rmsnorm.s1.fp32", "rmsnorm") and matches("qwen.rmsnorm.s1.fp32", "qwen.*.fp32")
    assert not matches("qwen.rmsnorm.s1.fp32", "qwen.rms*.bf16")


def test_suite_file_cases_are_listed(no_gpu, capsys, tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[[case]]\nname = "mine.gelu"\nexpression = "F.gelu(x)"\ninputs = ["x=64,64"]\n')
    assert listed(capsys, "--suite-file", str(path), "--filter", "mine.")[0] == ["mine.gelu"]


def test_no_matching_case_is_an_error(no_gpu, capsys):
    assert main(["bench", "--list", "--filter", "nothing-like-this"]) == 2
    assert "no bench case matches" in capsys.readouterr().err


def test_running_without_a_gpu_is_a_clear_error():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "lamina", "bench", "--filter", "running_example"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("lamina: error: lamina bench times kernels with CUDA graphs and needs a CUDA GPU")
    assert "Traceback" not in done.stderr


def test_plot_without_matplotlib_fails_before_running(no_gpu, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--filter", "running_example", "--plot", "x.png"]) == 2
    assert 'pip install "lamina[plot]"' in capsys.readouterr().err


def test_replays_must_be_positive(no_gpu, capsys):
    assert main(["bench", "--replays", "0"]) == 2
    assert "--replays 0" in capsys.readouterr().err


def test_a_run_prints_the_table_and_writes_the_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["bench", "--filter", "tiny.*", "--out", str(tmp_path / "run.json"),
                                      "--replays", "100"])
    stdout, stderr = io.StringIO(), io.StringIO()
    assert execute(args, tiny_cases(), device="cpu", device_name="the Kernel IR simulator", timer=FakeTimer(),
                   torch_compile=no_torch_compile, stdout=stdout, stderr=stderr) == 0
    text = stdout.getvalue()
    assert text.startswith("lamina bench: 2 case(s) on the Kernel IR simulator")
    assert "geomean speedup of lamina (warm L2): 4.00x vs eager, 2.00x vs torch.compile" in text
    assert stderr.getvalue() == "[1/2] tiny.rmsnorm\n[2/2] tiny.linear_qkv\n"
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["command"] == "lamina bench --filter 'tiny.*' --out run.json --replays 100"
    assert [c["name"] for c in document["cases"]] == ["tiny.rmsnorm", "tiny.linear_qkv"]
    assert all(c["status"] == "ok" and c["relative_error"] < 1e-5 for c in document["cases"])


def test_default_record_goes_to_benchmarks_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["bench"])
    execute(args, tiny_cases()[:1], device="cpu", device_name="NVIDIA H200", timer=FakeTimer(),
            torch_compile=no_torch_compile, stdout=io.StringIO(), stderr=io.StringIO())
    written = list((tmp_path / "benchmarks" / "results").glob("*_h200_bench.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["command"] == "lamina bench"


@pytest.mark.gpu
def test_the_running_example_and_a_norm_are_timed_on_the_gpu(tmp_path, monkeypatch):
    """The running example moves 9 KB: too little to overflow L2 with 256 input sets, so only
    the norm, a memory-bound case of 2 MB, gets a cold figure."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--filter", "running_example.fp32", "--filter", "tinyllama.rmsnorm.s128.fp32",
                 "--replays", "20", "--out", "run.json"]) == 0
    example, norm = json.loads((tmp_path / "run.json").read_text())["cases"]
    for case in (example, norm):
        assert case["status"] == "ok", case["message"]
        assert set(case["us"]) == {"lamina", "eager", "torch.compile"} and all(t > 0 for t in case["us"].values())
    assert example["cold_input_sets"] == 0 and not example["cold_us"]
    assert norm["cold_input_sets"] > 0 and set(norm["cold_us"]) == set(norm["us"])

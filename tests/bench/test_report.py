import datetime
import io
import json
import os

import pytest

from lamina.bench.plot import plot_speedups
from lamina.bench.report import (ProgressLine, default_output, format_table, gpu_slug, json_document,
                                 reproducing_command)
from lamina.bench.runner import CaseResult
from lamina.bench.suite import make_case
from lamina.core.errors import LaminaError
from lamina.program_spec import parse_input

ADD = make_case("demo.add", "x + y", (parse_input("x=1000,1000"), parse_input("y=1000,1000")))
MATMUL = make_case("demo.matmul", "x @ y", (parse_input("x=500,500:bfloat16"), parse_input("y=500,500:bfloat16")),
                   flops=2 * 500**3)


def results():
    return [
        CaseResult(ADD, "ok", error=1.5e-7, tolerance=1e-4, times={"lamina": 10.0, "eager": 40.0, "torch.compile": 20.0},
                   cold_times={"lamina": 12.0, "eager": 48.0, "torch.compile": 12.0}, cold_sets=9, copy_cold_us=15.0,
                   compile_seconds={"lamina": 0.25, "torch.compile": 1.0}),
        CaseResult(MATMUL, "ok", error=3e-3, tolerance=1e-2, times={"lamina": 2.0, "eager": 1.0, "torch.compile": 4.0},
                   compile_seconds={"lamina": 1.5, "torch.compile": 2.0}),
        CaseResult(ADD, "mismatch", "relative error 1.00e-02 over 1e-04", error=1e-2, tolerance=1e-4,
                   compile_seconds={"lamina": 0.3}),
        CaseResult(MATMUL, "failed", "1 unsupported op(s) in the program:"),
    ]


GOLDEN = """\
case           error  lamina us  eager us  t.compile us  vs eager  vs t.compile  GB/s  %copy  TFLOP/s  %peak  cold us  cold %copy  same-size copy %copy  cold vs t.compile  lamina build s  t.compile build s
-----------  -------  ---------  --------  ------------  --------  ------------  ----  -----  -------  -----  -------  ----------  --------------------  -----------------  --------------  -----------------
demo.add     1.5e-07       10.0      40.0          20.0     4.00x         2.00x  1200    28%     0.10     0%     12.0         23%                   19%              1.00x            0.25               1.00
demo.matmul  3.0e-03        2.0       1.0           4.0     0.50x         2.00x   750    18%   125.00    18%        -           -                     -                  -            1.50               2.00
demo.add     1.0e-02  MISMATCH: relative error 1.00e-02 over 1e-04
demo.matmul        -  FAILED: 1 unsupported op(s) in the program:

geomean speedup of lamina (warm L2): 1.41x vs eager, 2.00x vs torch.compile
geomean speedup of lamina (cold L2, memory-bound cases): 4.00x vs eager, 1.00x vs torch.compile
2 of 4 case(s) timed; 1 mismatch(es), 1 failure(s)"""


def test_table_golden():
    table = format_table(results())
    assert table.split("\n\n", 1)[1] == GOLDEN
    assert table.startswith("t.compile: torch.compile(dynamic=False).")


def test_json_record_schema_and_command():
    command = reproducing_command(["--filter", "demo", "--out", os.path.abspath("x/run.json")])
    document = json.loads(json.dumps(json_document(results(), command=command, device="NVIDIA H200", replays=100,
                                                   date="2026-11-29")))
    assert document["schema"] == "lamina-bench/1" and document["date"] == "2026-11-29"
    assert document["command"] == "lamina bench --filter demo --out x/run.json"
    assert document["device"] == "NVIDIA H200" and document["method"]["replays"] == 100
    assert document["ceilings"] == {"copy_bytes_per_s": 4.27e12, "flop_per_s": {"fp32": 51e12, "bf16": 684e12, "fp16": 684e12}}
    assert document["geomean_speedup"] == pytest.approx({"eager": 2**0.5, "torch.compile": 2.0})
    assert document["geomean_cold_speedup"] == pytest.approx({"eager": 4.0, "torch.compile": 1.0})
    add, matmul, mismatch, failed = document["cases"]
    assert add["name"] == "demo.add" and add["bytes"] == 12_000_000 and add["flops"] == 1_000_000
    assert add["inputs"][0] == {"name": "x", "shape": [1000, 1000], "dtype": "float32"}
    assert add["memory_bound"] and add["us"]["lamina"] == 10.0 and add["cold_input_sets"] == 9
    assert add["lamina_gb_per_s"] == pytest.approx(1200) and add["lamina_cold_gb_per_s"] == pytest.approx(1000)
    assert add["speedup"] == {"eager": 4.0, "torch.compile": 2.0}
    assert matmul["dtype"] == "bf16" and not matmul["memory_bound"]
    assert add["same_size_copy_cold_us"] == 15.0
    assert matmul["lamina_tflop_per_s"] == pytest.approx(125.0) and matmul["cold_us"] == {}
    assert matmul["same_size_copy_cold_us"] is None
    assert mismatch["status"] == "mismatch" and mismatch["us"] == {} and mismatch["relative_error"] == 1e-2
    assert failed["status"] == "failed" and failed["message"].startswith("1 unsupported")


@pytest.mark.parametrize("word, expected", [
    ("--suite-file=/", "--suite-file=" + os.path.relpath("/")),
    ("relative/path.toml", "relative/path.toml"),
    ("qwen.*", "'qwen.*'"),
])
def test_recorded_command_has_no_absolute_path(word, expected):
    assert reproducing_command([word]) == f"lamina bench {expected}"


def test_default_output_path():
    assert gpu_slug("NVIDIA H200") == "h200"
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert gpu_slug("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090"
    path = default_output("NVIDIA H200", datetime.date(2026, 11, 29))
    assert path.as_posix() == "benchmarks/results/2026-11-29_h200_bench.json"


class Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_line_rewrites_itself_on_a_terminal():
    terminal, log = Stream(True), Stream(False)
    for stream in (terminal, log):
        progress = ProgressLine(stream)
        progress(0, 2, "a")
        progress(1, 2, "b")
        progress(2, 2, "")
    assert terminal.getvalue() == "\r\033[K[0/2] a\r\033[K[1/2] b\r\033[K"
    assert log.getvalue() == "[1/2] a\n[2/2] b\n"


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(LaminaError, match=r'pip install "lamina\[plot\]"'):
        plot_speedups(results(), tmp_path / "speedups.png")


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "speedups.png"
    plot_speedups(results(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

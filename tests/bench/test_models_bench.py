"""``lamina bench --models`` on the CPU: the case list, the options, the error rule, the record, and the runner
with stand-ins for the GPU's instruments (once end to end through torch.compile(backend="lamina"))."""

import contextlib
import datetime
import io
import json
import os
import sys
import time

import pytest
import torch

from lamina.bench import plot
from lamina.bench.model_report import SCHEMA, format_model_table, json_document, plot_model_speedups
from lamina.bench.measure import samples_within
from lamina.bench.model_runner import (Compilers, Instruments, ModelResult, exclusive, failure_message,
                                       fresh_kernel_cache, geomean_speedups, inductor_compile, judge, lamina_compile,
                                       plain_call_us, run_model_case, run_model_suite)
from lamina.bench.model_suite import BENCH_LAYERS, ModelCase, bench_layers, model_cases, parse_layer_overrides
from lamina.bench.report import ProgressLine, default_output, reproducing_command
from lamina.cli.bench_command import execute_models, model_command_words
from lamina.cli.main import build_parser, main
from lamina.core.errors import LaminaError, UnsupportedOpError
from lamina.models.architectures import ARCHITECTURES

TIMES = {"graph_us": {"lamina": 100.0, "eager": 200.0, "torch.compile": 50.0},
         "calls_us": {"lamina": 400.0, "eager": 400.0, "torch.compile": 100.0}}
KERNELS = {"lamina": 30, "eager": 90, "torch.compile": 40}


class FakeInstruments:
    """Fixed times and kernel counts per contender, recording what was measured, without running the calls."""

    def __init__(self, kernels=lambda contender, call: KERNELS[contender]):
        self.measured = []
        self.instruments = Instruments(timer=self.timer, count_kernels=self.count(kernels),
                                       peak_memory=self.memory, synchronize=lambda: None)

    def timer(self, contender, figure, call):
        self.measured.append((figure, contender))
        return TIMES[figure][contender]

    def count(self, kernels):
        def count_kernels(contender, call):
            self.measured.append(("kernels", contender))
            return kernels(contender, call)
        return count_kernels

    def memory(self, contender, call):
        self.measured.append(("peak_bytes", contender))
        return 2**20


def module_calls(contender, call):
    """A kernel counter's stand-in that counts something real: the modules one call runs."""
    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, out: seen.append(module))
    try:
        call()
    finally:
        handle.remove()
    return len(seen)


EAGER = Compilers(lamina=lambda model: model, torch_compile=lambda model: model)


def small(arch, dtype=torch.float32, length=13, batch=1):
    return ModelCase(ARCHITECTURES[arch], batch, length, dtype, ARCHITECTURES[arch].layers("small"), size="small")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def listed(capsys, *argv):
    assert main(["bench", "--models", "--list", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line.split()[0] for line in lines[1:-1]], lines


# The case list and its options.

def test_every_architecture_at_two_batches_its_lengths_and_two_dtypes():
    cases = model_cases()
    assert len(cases) == 2 * 2 * sum(len(a.lengths) for a in ARCHITECTURES.values()) == 132
    names = [c.name for c in cases]
    assert len(set(names)) == len(names) and {c.arch.name for c in cases} == set(ARCHITECTURES)
    assert names[:6] == ["gpt2.b1.s128.bf16", "gpt2.b1.s512.bf16", "gpt2.b8.s128.bf16", "gpt2.b8.s512.bf16",
                         "gpt2.b1.s128.fp32", "gpt2.b1.s512.fp32"]
    by_name = {c.name: c for c in cases}
    llama = by_name["llama.b1.s512.bf16"]
    assert llama.layers == 22 and llama.depth == "22 of 22" and llama.dtype == torch.bfloat16
    assert by_name["mistral.b8.s2048.fp32"].depth == "4 of 32"
    assert {"vit.b8.s224.fp32", "cnn.b1.s224.bf16", "whisper-encoder.b1.s1500.bf16"} <= set(names)
    whisper = by_name["whisper-encoder.b1.s1500.bf16"]
    assert whisper.describe().endswith("mel features 1x80x3000 (1500 encoder positions)")
    assert "KV cache on" in llama.describe() and "KV cache" not in by_name["bert.b8.s128.fp32"].describe()


def test_bench_layers_cut_big_models_and_overrides_win():
    layers = bench_layers()
    assert layers["llama"] == 22 and layers["qwen3"] == 28 and layers["gpt2"] == 12 and layers["cnn"] == 3
    cut = ("phi3", "gemma", "gemma2", "mistral", "qwen2")
    assert {name: layers[name] for name in BENCH_LAYERS} == {name: 4 for name in cut}
    overridden = bench_layers(parse_layer_overrides(["mistral=32", " llama = 2"]))
    assert overridden["mistral"] == 32 and overridden["llama"] == 2 and overridden["gemma"] == 4


@pytest.mark.parametrize("items, message", [
    (["mistral"], "write ARCH=N"),
    (["mistral=four"], "write ARCH=N"),
    (["mistal=2"], "unknown architecture 'mistal'"),
    (["mistral=0"], "mistral (Mistral-7B v0.1) has 1 to 32 layers"),
    (["cnn=4"], "has 1 to 3 layers"),
    (["gpt2=1", "gpt2=2"], "names gpt2 twice"),
])
def test_layer_overrides_that_cannot_be_built_are_errors(items, message):
    with pytest.raises(LaminaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_layer_overrides(items)


def test_list_shows_layers_and_what_each_case_builds_without_a_gpu(no_gpu, capsys):
    names, lines = listed(capsys, "--filter", "llama.b1.*.bf16", "--layers", "llama=3")
    assert names == ["llama.b1.s128.bf16", "llama.b1.s512.bf16", "llama.b1.s2048.bf16"]
    assert lines[0].split() == ["case", "layers", "builds"] and lines[-1] == "3 case(s)"
    assert lines[1].split(None, 4)[1:] == ["3", "of", "22",
                                           "TinyLlama-1.1B (LlamaForCausalLM), bfloat16: token ids and attention mask "
                                           "1x128, KV cache on"]


def test_filter_by_substring_glob_and_dtype(no_gpu, capsys):
    assert listed(capsys, "--filter", "vit", "--dtype", "float32")[0] == ["vit.b1.s224.fp32", "vit.b8.s224.fp32"]
    names, _ = listed(capsys, "--filter", "*.b8.s2048.bf16")
    assert [n.split(".")[0] for n in names] == ["opt", "phi3", "gemma", "gemma2", "mistral", "qwen2", "qwen3", "llama"]
    names, _ = listed(capsys, "--filter", "cnn.b1", "--filter", "t5-encoder.b8.s512.fp32")
    assert names == ["t5-encoder.b8.s512.fp32", "cnn.b1.s224.bf16", "cnn.b1.s224.fp32"]


@pytest.mark.parametrize("argv, message", [
    (["--models", "--list", "--filter", "nothing-like-this"], "no model case matches --filter/--dtype"),
    (["--models", "--list", "--layers", "llama=99"], "llama (TinyLlama-1.1B) has 1 to 22 layers"),
    (["--models", "--list", "--suite-file", "mine.toml"], "--suite-file adds kernel cases"),
    (["--list", "--layers", "llama=2", "--no-per-layer"],
     "--layers, --no-per-layer apply to the model suite: add --models"),
    (["--models", "--replays", "0"], "--replays 0"),
    (["--models", "--filter", "cnn.b1.s224.fp32"],
     "lamina bench --models times models with CUDA graphs and needs a CUDA GPU"),
])
def test_wrong_options_are_one_clear_error(no_gpu, capsys, argv, message):
    assert main(["bench", *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("lamina: error: ") and message in error and "Traceback" not in error


def test_plot_without_matplotlib_fails_before_running(no_gpu, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["bench", "--models", "--filter", "cnn.b1.s224.fp32", "--plot", "x.png"]) == 2
    assert 'pip install "lamina[plot]"' in capsys.readouterr().err


def test_the_record_goes_to_a_models_file_with_the_command_that_reproduces_it():
    assert default_output("NVIDIA H200", datetime.date(2026, 12, 1), suite="models").as_posix() == \
        "benchmarks/results/2026-12-01_h200_models.json"
    args = build_parser().parse_args(["bench", "--models", "--filter", "llama.*", "--layers", "llama=4",
                                      "--no-per-layer", "--replays", "50", "--out", os.path.abspath("r/m.json")])
    assert reproducing_command(model_command_words(args)) == \
        "lamina bench --models --filter 'llama.*' --layers llama=4 --out r/m.json --replays 50 --no-per-layer"


# The rule a result is judged by.

@pytest.mark.parametrize("dtype, lamina_error, eager_error, ok, ratio", [
    (torch.float32, 9.9e-5, 1e-7, True, 990.0),
    (torch.float32, 1e-4, 1e-7, False, 1000.0),
    (torch.float32, float("inf"), 1e-7, False, float("inf")),
    (torch.bfloat16, 5e-3, 4e-3, True, 1.25),
    (torch.bfloat16, 2e-3, 4e-3, True, 0.5),
    (torch.bfloat16, 5.1e-3, 4e-3, False, 1.275),
    (torch.bfloat16, float("nan"), 4e-3, False, None),
    (torch.bfloat16, 0.0, 0.0, True, 1.0),
])
def test_fp32_is_judged_by_a_tolerance_and_bf16_against_eagers_own_error(dtype, lamina_error, eager_error, ok, ratio):
    verdict = judge(dtype, lamina_error, eager_error)
    assert verdict.ok is ok and (verdict.message == "") is ok
    if ratio is not None:
        assert verdict.ratio == pytest.approx(ratio)


def test_mismatch_messages_say_by_how_much():
    assert judge(torch.float32, 3e-4, 1e-7).message == "relative error 3.00e-04, not under 1e-04"
    assert judge(torch.bfloat16, 8e-3, 4e-3).message == ("relative error 8.00e-03 is 2.00x eager bfloat16's 4.00e-03, "
                                                         "over 1.25x")


# Geomeans, the table and the record, from results made by hand.

LLAMA = ModelCase(ARCHITECTURES["llama"], 1, 512, torch.bfloat16, 22)
MISTRAL = ModelCase(ARCHITECTURES["mistral"], 8, 128, torch.float32, 4)


def results():
    errors = {"eager": 4e-3, "lamina": 4.4e-3, "torch.compile": 4.1e-3}
    common = dict(reference="float32", errors=errors, error_ratio=1.1,
                  compile_seconds={"lamina_cold": 48.0, "lamina_warm": 41.0, "torch.compile": 38.0})
    full = {**TIMES, "kernels": dict(KERNELS),
            "kernels_per_layer": {"lamina": 12.0, "eager": 14.0, "torch.compile": 9.0},
            "peak_bytes": {"lamina": 3 * 2**20, "eager": 2**20, "torch.compile": 2**21}}
    no_graph = {**full, "graph_us": {"eager": 400.0, "torch.compile": 100.0}}
    return [
        ModelResult(LLAMA, "ok", values=full, **common),
        ModelResult(MISTRAL, "ok", values=no_graph, unmeasured={"graph_us": {"lamina": "RuntimeError: capture failed"}},
                    **common),
        ModelResult(LLAMA, "mismatch", "relative error 8.00e-03 is 2.00x eager bfloat16's 4.00e-03, over 1.25x",
                    reference="float32", errors={"eager": 4e-3, "lamina": 8e-3}, error_ratio=2.0),
        ModelResult(MISTRAL, "failed", "1 unsupported op(s) in the program: aten.fancy.default",
                    compile_seconds={"lamina_cold": 1.0}),
    ]


def test_geomeans_cover_the_cases_where_both_were_timed():
    means = geomean_speedups(results())
    assert means["graph_us"] == {"eager": pytest.approx((2.0, 1)), "torch.compile": pytest.approx((0.5, 1))}
    assert means["calls_us"] == {"eager": pytest.approx((1.0, 2)), "torch.compile": pytest.approx((0.25, 2))}
    twice_as_fast = ModelResult(MISTRAL, "ok", values={"calls_us": {"lamina": 100.0, "eager": 400.0}})
    assert geomean_speedups([results()[0], twice_as_fast])["calls_us"]["eager"] == pytest.approx((2.0, 2))
    assert geomean_speedups(results()[2:]) == {}


def test_the_table_shows_every_case_and_the_geomeans():
    lines = format_model_table(results()).splitlines()
    header = next(k for k, line in enumerate(lines) if line.startswith("case"))
    rows = lines[header + 2:header + 6]
    assert [row.split()[0] for row in rows] == ["llama.b1.s512.bf16", "mistral.b8.s128.fp32"] * 2
    assert rows[0].split() == ["llama.b1.s512.bf16", "22", "of", "22", "4.4e-03", "1.10x",
                               "0.100", "0.200", "0.050", "2.00x", "0.50x", "0.400", "0.400", "0.100", "1.00x", "0.25x",
                               "30/90/40", "12/14/9", "3/1/2", "48.0/41.0/38.0"]
    assert rows[1].split()[6:11] == ["-", "0.400", "0.100", "-", "-"]
    assert rows[2].split()[:7] == ["llama.b1.s512.bf16", "22", "of", "22", "8.0e-03", "2.00x", "MISMATCH:"]
    assert rows[3].split()[:7] == ["mistral.b8.s128.fp32", "4", "of", "32", "-", "-", "FAILED:"]
    assert "  mistral.b8.s128.fp32, graph_us of lamina: RuntimeError: capture failed" in lines
    assert lines[-3:] == [
        "geomean speedup of lamina, CUDA-graph replay: 2.00x vs eager (1 case(s)), 0.50x vs torch.compile (1 case(s))",
        "geomean speedup of lamina, plain calls: 1.00x vs eager (2 case(s)), 0.25x vs torch.compile (2 case(s))",
        "2 of 4 case(s) measured; 1 mismatch(es), 1 failure(s)"]


def test_the_record_holds_the_method_versions_and_every_number():
    document = json.loads(json.dumps(json_document(results(), command="lamina bench --models", device="NVIDIA H200",
                                                   replays=100, date="2026-12-01")))
    assert document["schema"] == SCHEMA and document["suite"] == "models" and document["date"] == "2026-12-01"
    assert document["device"] == "NVIDIA H200" and document["torch"] == torch.__version__
    assert {"lamina", "transformers", "python"} <= set(document)
    assert document["method"]["replays"] == 100 and "CUDA-graph" in document["method"]["graph_us"]
    assert document["geomean_speedup"]["calls_us"]["torch.compile"] == {"speedup": 0.25, "cases": 2}
    llama, mistral, mismatch, failed = document["cases"]
    assert llama["name"] == "llama.b1.s512.bf16" and llama["layers"] == 22 and llama["layers_in_checkpoint"] == 22
    assert llama["dtype"] == "bf16" and llama["batch"] == 1 and llama["length"] == 512
    assert llama["relative_error"] == {"eager": 4e-3, "lamina": 4.4e-3, "torch.compile": 4.1e-3}
    assert llama["error_ratio"] == 1.1 and "1.25x eager bfloat16's own" in llama["judged_by"]
    assert llama["graph_us"] == TIMES["graph_us"] and llama["kernels"] == KERNELS
    assert llama["kernels_per_layer"]["lamina"] == 12.0 and llama["peak_bytes"]["lamina"] == 3 * 2**20
    assert llama["compile_seconds"] == {"lamina_cold": 48.0, "lamina_warm": 41.0, "torch.compile": 38.0}
    assert llama["speedup"] == {"graph_us": {"eager": 2.0, "torch.compile": 0.5},
                                "calls_us": {"eager": 1.0, "torch.compile": 0.25}}
    assert mistral["layers"] == 4 and mistral["layers_in_checkpoint"] == 32
    assert mistral["unmeasured"] == {"graph_us": {"lamina": "RuntimeError: capture failed"}}
    assert mistral["speedup"]["graph_us"] == {} and "under 0.0001" in mistral["judged_by"]
    assert mismatch["status"] == "mismatch" and mismatch["graph_us"] == {} and mismatch["error_ratio"] == 2.0
    assert failed["status"] == "failed" and failed["message"].endswith("aten.fancy.default")
    assert "measure_lock" not in document["method"]


def test_a_record_of_processes_sharing_the_gpu_says_what_that_means_for_its_compile_times():
    document = json_document(results(), command="lamina bench --models --measure-lock l", device="NVIDIA H200",
                             replays=100, shared=True)
    assert "plain-call and compile times may include" in document["method"]["measure_lock"]


def test_the_plot_has_a_bar_per_contender_and_figure_for_each_timed_case(monkeypatch, tmp_path):
    drawn = []
    monkeypatch.setattr(plot, "plot_speedup_bars", lambda names, series, path: drawn.append((names, series)))
    plot_model_speedups(results(), tmp_path / "models.png")
    [(names, series)] = drawn
    assert names == ["llama.b1.s512.bf16", "mistral.b8.s128.fp32"]
    assert series == {"vs eager, CUDA-graph replay": [2.0, None], "vs torch.compile, CUDA-graph replay": [0.5, None],
                      "vs eager, plain calls": [1.0, 1.0], "vs torch.compile, plain calls": [0.25, 0.25]}
    with pytest.raises(LaminaError, match="no case was timed"):
        plot_model_speedups(results()[2:], tmp_path / "models.png")


# The runner, with eager PyTorch standing in for the compilers.

def test_kernels_per_layer_from_a_one_layer_model():
    """A CNN block is a convolution, a batch norm, a ReLU and a pooling: four modules a layer."""
    fake = FakeInstruments(kernels=module_calls)
    result = run_model_case(small("cnn"), device="cpu", instruments=fake.instruments, compilers=EAGER)
    assert result.status == "ok", result.message
    assert result.values["kernels"] == {"lamina": 12, "eager": 12, "torch.compile": 12}
    assert result.values["kernels_per_layer"] == {"lamina": 4.0, "eager": 4.0, "torch.compile": 4.0}
    without = run_model_case(small("cnn"), device="cpu", instruments=FakeInstruments().instruments, compilers=EAGER,
                             per_layer=False)
    assert without.values["kernels_per_layer"] == {}


def test_each_contender_is_measured_in_every_figure():
    fake = FakeInstruments()
    result = run_model_case(small("bert"), device="cpu", instruments=fake.instruments, compilers=EAGER, per_layer=False)
    assert result.status == "ok" and result.reference == "float64" and result.error_ratio == 1.0
    assert set(result.errors) == {"lamina", "eager", "torch.compile"} and result.errors["lamina"] < 1e-6
    assert {m: result.values[m] for m in TIMES} == TIMES and result.values["peak_bytes"]["eager"] == 2**20
    assert set(result.compile_seconds) == {"lamina_cold", "lamina_warm", "torch.compile"}
    assert sorted(fake.measured) == sorted((m, c) for m in ("peak_bytes", "kernels", *TIMES) for c in KERNELS)
    assert result.speedup("eager", "graph_us") == 2.0 and result.speedup("torch.compile", "calls_us") == 0.25


def test_bfloat16_is_checked_against_float32():
    result = run_model_case(small("llama", torch.bfloat16), device="cpu", instruments=FakeInstruments().instruments,
                            compilers=EAGER, per_layer=False)
    assert result.status == "ok" and result.reference == "float32"
    assert 1e-4 < result.errors["eager"] < 3e-2 and result.error_ratio == 1.0


def test_a_contender_that_cannot_be_timed_leaves_the_rest_standing():
    fake = FakeInstruments()

    def no_graph_for_lamina(contender, figure, call):
        if (contender, figure) == ("lamina", "graph_us"):
            raise RuntimeError("operation not permitted when stream is capturing\nmore detail")
        return fake.timer(contender, figure, call)

    instruments = Instruments(timer=no_graph_for_lamina, count_kernels=fake.instruments.count_kernels,
                              peak_memory=fake.memory, synchronize=lambda: None)
    result = run_model_case(small("cnn"), device="cpu", instruments=instruments, compilers=EAGER, per_layer=False)
    assert result.status == "ok"
    assert result.unmeasured == {"graph_us": {"lamina": "RuntimeError: operation not permitted when stream is "
                                                        "capturing more detail"}}
    assert result.speedup("eager", "graph_us") is None and result.speedup("eager", "calls_us") == 1.0


def test_a_torch_compile_that_fails_is_left_out():
    def broken(model):
        raise RuntimeError("inductor is unhappy")

    result = run_model_case(small("cnn"), device="cpu", instruments=FakeInstruments().instruments,
                            compilers=Compilers(lamina=lambda model: model, torch_compile=broken), per_layer=False)
    assert result.status == "ok" and "torch.compile" not in result.errors
    assert result.unmeasured == {"compile_seconds": {"torch.compile": "RuntimeError: inductor is unhappy"}}
    assert set(result.values["graph_us"]) == {"lamina", "eager"}


def test_a_wrong_output_is_a_mismatch_and_not_measured():
    def off_by_a_bit(model):
        return lambda **inputs: model(**inputs) * 1.01

    fake = FakeInstruments()
    result = run_model_case(small("cnn"), device="cpu", instruments=fake.instruments,
                            compilers=Compilers(lamina=off_by_a_bit, torch_compile=None))
    assert result.status == "mismatch" and result.errors["lamina"] == pytest.approx(0.01, rel=1e-3)
    assert result.message == f"relative error {result.errors['lamina']:.2e}, not under 1e-04"
    assert fake.measured == [] and result.values == {}


def test_a_case_lamina_cannot_compile_is_recorded_and_the_run_goes_on(tmp_path):
    class BackendCompilerFailed(Exception):
        """torch.compile's wrapper around what the backend raised."""

        def __init__(self, inner):
            super().__init__(f"backend='lamina' raised:\n{inner}")
            self.inner_exception = inner

    def refuse_bert(model):
        if type(model).__name__ == "BertModel":
            raise BackendCompilerFailed(UnsupportedOpError([("aten.fancy.default", "")]))
        return model

    args = build_parser().parse_args(["bench", "--models", "--out", str(tmp_path / "run.json"), "--no-torch-compile"])
    stdout, stderr = io.StringIO(), io.StringIO()
    status = execute_models(args, [small("bert"), small("cnn")], device="cpu", device_name="CPU",
                            instruments=FakeInstruments().instruments, compilers=Compilers(lamina=refuse_bert),
                            stdout=stdout, stderr=stderr)
    assert status == 1
    bert, cnn = json.loads((tmp_path / "run.json").read_text())["cases"]
    assert bert["status"] == "failed" and "traceback" not in bert
    assert bert["message"].startswith("1 unsupported op(s) in the program: aten.fancy.default Add a decomposition")
    assert cnn["status"] == "ok" and set(cnn["graph_us"]) == {"lamina", "eager"}
    assert "bert.b1.s13.fp32  2 of 2        -        -  FAILED: 1 unsupported op(s)" in stdout.getvalue()
    cases = [line for line in stderr.getvalue().splitlines() if not line.startswith("    ")]
    assert cases == ["[1/2] bert.b1.s13.fp32 (2 of 2 layers)", "[2/2] cnn.b1.s13.fp32 (2 of 2 layers)"]


def test_failures_that_are_bugs_keep_their_traceback():
    def crash(model):
        raise KeyError("missing")

    result = run_model_case(small("cnn"), device="cpu", instruments=FakeInstruments().instruments,
                            compilers=Compilers(lamina=crash))
    assert result.status == "failed" and result.message == "KeyError: 'missing'"
    assert "Traceback" in result.traceback and failure_message(ValueError("a\n  b")) == "ValueError: a b"


def test_results_are_handed_on_as_soon_as_they_are_measured():
    seen = []
    run_model_suite([small("cnn"), small("cnn", torch.bfloat16)], device="cpu",
                    instruments=FakeInstruments().instruments, compilers=EAGER, per_layer=False,
                    measured=lambda results: seen.append([r.case.name for r in results]))
    assert seen == [["cnn.b1.s13.fp32"], ["cnn.b1.s13.fp32", "cnn.b1.s13.bf16"]]


def test_each_case_says_what_it_has_done_so_far():
    steps = []
    run_model_suite([small("cnn")], device="cpu", instruments=FakeInstruments().instruments, compilers=EAGER,
                    per_layer=False, step=steps.append)
    assert [s.split(" ")[0] for s in steps] == ["eager", "lamina", "torch.compile", "measured"]
    assert steps[0].startswith("eager reference in float64 (") and "cold" in steps[1] and "warm" in steps[1]


def test_the_progress_line_puts_a_case_step_on_its_own_line_in_a_log():
    log = io.StringIO()
    progress = ProgressLine(log)
    progress(0, 2, "cnn.b1.s13.fp32 (2 layers)")
    progress.step("lamina compiled: cold 3 s, warm 1 s")
    assert log.getvalue() == "[1/2] cnn.b1.s13.fp32 (2 layers)\n    lamina compiled: cold 3 s, warm 1 s\n"


def test_both_compilers_are_torch_compile_with_static_shapes(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **options: calls.append(options))
    lamina_compile(torch.nn.Identity())
    inductor_compile(torch.nn.Identity())
    assert calls == [{"backend": "lamina", "dynamic": False}, {"dynamic": False}]


def test_the_cold_compile_sees_an_empty_kernel_cache_of_its_own(monkeypatch):
    monkeypatch.setenv("LAMINA_CACHE_DIR", "/the/users/cache")
    with fresh_kernel_cache() as directory:
        assert os.environ["LAMINA_CACHE_DIR"] == directory and os.listdir(directory) == []
    assert os.environ["LAMINA_CACHE_DIR"] == "/the/users/cache" and not os.path.exists(directory)


def test_plain_calls_wait_for_each_call():
    events = []
    us = plain_call_us(lambda: events.append("call"), calls=5, synchronize=lambda: events.append("sync"), warmup=2)
    assert us > 0 and events == ["call", "sync", "call", "sync"] + ["call", "sync"] * 5


def test_long_calls_are_timed_fewer_times_within_the_budget():
    assert samples_within(100, 0.001, 5.0, 5) == 100 and samples_within(100, 0.001, None, 5) == 100
    assert samples_within(100, 0.2, 5.0, 5) == 25 and samples_within(100, 3.0, 5.0, 5) == 5
    events = []
    plain_call_us(lambda: (events.append("call"), time.sleep(0.02)), calls=30, synchronize=lambda: None,
                  budget_s=0.1)
    assert 3 <= len(events) - 3 < 30  # the first call, two warm-ups and as many timed calls as fit, at least 3


def test_the_measuring_lock_is_reentrant(tmp_path):
    lock = str(tmp_path / "lock")
    with exclusive(lock):
        with exclusive(lock):  # a compiled graph taking its turn inside a measurement
            pass
        with exclusive(lock):
            pass
    with exclusive(lock):  # and free again afterwards
        pass


def test_compiled_graphs_take_their_turn_to_run(tmp_path):
    turns = []

    @contextlib.contextmanager
    def turn():
        turns.append("turn")
        yield

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(3, 8)
    compiled = lamina_compile(model, turn)
    torch.testing.assert_close(compiled(x), model(x))
    compiled(x)
    assert turns == ["turn", "turn"]


# End to end, through torch.compile(model, backend="lamina") on the simulator.

def test_a_small_model_through_torch_compile_on_the_simulator(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compiled = []

    def lamina(model):
        compiled.append(lamina_compile(model))
        return compiled[-1]

    args = build_parser().parse_args(["bench", "--models", "--filter", "bert", "--no-per-layer"])
    stdout = io.StringIO()
    status = execute_models(args, [small("bert")], device="cpu", device_name="NVIDIA H200",
                            instruments=FakeInstruments().instruments,
                            compilers=Compilers(lamina=lamina, torch_compile=EAGER.torch_compile),
                            stdout=stdout, stderr=io.StringIO())
    assert status == 0, stdout.getvalue()
    assert len(compiled) == 2 and all(type(c).__name__ == "OptimizedModule" for c in compiled)  # cold, then warm
    document = json.loads(next((tmp_path / "benchmarks" / "results").glob("*_h200_models.json")).read_text())
    assert document["command"] == "lamina bench --models --filter bert --no-per-layer"
    [case] = document["cases"]
    assert case["status"] == "ok" and case["name"] == "bert.b1.s13.fp32" and case["reference"] == "float64"
    assert 0 < case["relative_error"]["lamina"] < 1e-5 and case["relative_error"]["eager"] < 1e-5
    assert case["graph_us"] == TIMES["graph_us"] and case["kernels"] == KERNELS and case["kernels_per_layer"] == {}
    assert case["compile_seconds"]["lamina_cold"] > case["compile_seconds"]["torch.compile"]
    assert case["speedup"]["graph_us"] == {"eager": 2.0, "torch.compile": 0.5}
    assert "geomean speedup of lamina, CUDA-graph replay: 2.00x vs eager (1 case(s))" in stdout.getvalue()

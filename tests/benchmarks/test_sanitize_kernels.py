"""benchmarks/sanitize_kernels.py: the settings it finds and their representatives (CPU), the
processes it runs under a stand-in for compute-sanitizer (CPU), and one representative under
the real memcheck (GPU)."""

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import attrs
import pytest
import torch

import kernel_settings as ks
import sanitize_kernels
from lamina.bench.suite import builtin_suite
from lamina.program_spec import InputSpec

FEW_CASES = ("running_example.fp32", "running_example.bf16", "tinyllama.rmsnorm.s1.fp32", "tinyllama.silu_mul.s1.fp32",
             "tinyllama.scores.s1.bf16", "tinyllama.scores.s128.fp32", "tinyllama.linear_o.s128.fp32")


@pytest.fixture(scope="module")
def few_compiled():
    cases = {c.name: c for c in builtin_suite()}
    compiled, failed = ks.compile_all([ks.SuiteProgram.of(cases[name]) for name in FEW_CASES])
    assert not failed
    return compiled


@pytest.fixture(scope="module")
def few(few_compiled):
    return ks.representatives(few_compiled)


def test_the_settings_of_a_few_cases_span_the_schedules_and_products(few):
    schedules = {dict(r.setting)["schedule"] for r in few}
    assert schedules == {"pointwise", "row_reduction", "contraction", "unrolled_reduction", "matmul_row_reduction"}
    products = {dict(r.setting).get("products") for r in few if dict(r.setting)["schedule"] == "contraction"}
    assert {"fma", "wgmma"} <= products
    reductions = {dict(r.setting)["reduction"] for r in few if dict(r.setting)["schedule"] == "row_reduction"}
    assert {"block_tree", "warp_shuffle"} <= reductions
    assert len({r.setting for r in few}) == len(few) and len({r.id for r in few}) == len(few)


def test_the_decode_attention_and_the_hopper_gemm_settings_are_told_apart():
    """Each schedule's own settings name what changes its CUDA: the decode attention's products
    and combined key ranges, the Hopper GEMM's warpgroups and the attention's turn-taking."""
    cases = {c.name: c for c in builtin_suite()}
    compiled, failed = ks.compile_all([ks.SuiteProgram.of(cases[name]) for name in (
        "tinyllama.attention_decode.c512.bf16", "tinyllama.linear_qkv.s128.bf16", "qwen.attention.s2048.bf16")])
    assert not failed
    features = [dict(setting) for c in compiled for _, setting, _ in c.kernels]
    decode = next(f for f in features if f["schedule"] == "attention_decode")
    assert decode["products"] in ("tensor_cores", "cuda_cores") and decode["key_ranges_combined"] == "yes"
    gemm = next(f for f in features if f.get("products") == "wgmma_tma")
    assert gemm["consumer_warpgroups"] in ("1", "2") and gemm["tile_scheduler"]
    attention = next(f for f in features if f["schedule"] == "attention")
    assert attention["warpgroups"] in ("in_step", "ping_pong")


def test_the_enumeration_is_deterministic(few, few_compiled):
    again = ks.representatives(list(reversed(few_compiled)))
    assert [r.to_json() for r in again] == [r.to_json() for r in few]
    in_two_processes = ks.representatives(few_compiled, jobs=2)
    assert [r.to_json() for r in in_two_processes] == [r.to_json() for r in few]


def test_a_large_case_is_represented_at_smaller_sizes_with_the_same_setting(few):
    shrunk = [r for r in few if r.shrunk_from]
    assert shrunk, "the split-K linear and the wgmma scores are large enough to shrink"
    for r in shrunk:
        assert r.work <= 64 * ks.SMALL_WORK and r.program.knobs, r.id
        compiled = ks.compile_program(r.program)
        assert (r.kernel, r.setting) in {(name, setting) for name, setting, _ in compiled.kernels}


def test_each_representative_is_the_least_work_of_its_setting(few, few_compiled):
    for r in few:
        if r.shrunk_from is None:
            works = [c.work for c in few_compiled for _, setting, _ in c.kernels if setting == r.setting]
            assert r.work == min(works)


def test_pinned_knobs_reproduce_the_chosen_setting():
    """The knobs read back from a Tile IR make the schedule choose the same setting again."""
    x, w = torch.randn(200, 96), torch.randn(136, 96)
    import lamina
    tile = lamina.compile(lambda x, w: x @ w.t(), (x, w), target="sm_90").compilation.tiles[0]
    pins = ks.pins_of(tile)
    again = lamina.compile(lambda x, w: x @ w.t(), (x, w), target="sm_90", knobs=pins).compilation.tiles[0]
    assert ks.setting_of(again) == ks.setting_of(tile)
    assert dict(again.knobs)["chosen"].split(";")[0] == dict(tile.knobs)["chosen"].split(";")[0]


def test_representatives_round_trip_through_json(few, tmp_path, capsys):
    path = tmp_path / "representatives.json"
    path.write_text(json.dumps({"enumeration": {}, "representatives": [r.to_json() for r in few]}))
    back = [ks.representative_from_json(d) for d in json.loads(path.read_text())["representatives"]]
    assert back == few
    assert sanitize_kernels.main(["--list", "--representatives", str(path), "--filter", "contraction-*"]) == 0
    printed = capsys.readouterr().out
    assert "contraction-1 " in printed and "pointwise-" not in printed


def test_what_runs_inside_the_tool_checks_against_eager_on_the_simulator(few):
    """``--run``'s program run, on the simulator: a suite case and a scaled-down model pass; the same
    case with a kernel expected to have another setting does not."""
    (relu,) = [r for r in few if r.program.name == "running_example.fp32"]
    assert sanitize_kernels.run_program([relu], device="cpu")[0] == "ok"
    model = ks.Representative("generic-1", ks.setting_of(_first_generic_tile()), ks.ModelProgram("cnn", 13),
                              "max_pool2d_with_indices_max", 1, 1)
    status, detail = sanitize_kernels.run_program([model], device="cpu")
    assert status == "ok", detail
    moved = attrs.evolve(relu, setting=relu.setting + (("vector_width", "8"),))
    assert sanitize_kernels.run_program([moved], device="cpu")[0] == "setting-changed"


def test_a_setting_is_exercised_where_another_kernel_of_the_program_has_it(few):
    """The device's capture may name the kernels otherwise (CUDA's attention ops): the setting still
    runs, and the check says in which kernel."""
    (relu,) = [r for r in few if r.program.name == "running_example.fp32"]
    renamed = attrs.evolve(relu, kernel="a_kernel_named_otherwise")
    status, detail = sanitize_kernels.run_program([renamed], device="cpu")
    assert status == "ok" and f"{relu.id} in kernel {relu.kernel}" in detail, detail


def test_a_model_with_a_kv_cache_is_checked_on_every_tensor_it_returns(tmp_path):
    """OPT returns its logits and a DynamicCache; in a fresh process (``--run``, as under the tool)
    eager's cache is compared tensor by tensor with the compiled program's."""
    tiles = ks.ModelProgram("opt", 13).compile().compilation.tiles
    first = ks.Representative("row_reduction-1", ks.setting_of(tiles[0]), ks.ModelProgram("opt", 13),
                              tiles[0].kernel.name, 1, 1)
    path = tmp_path / "representatives.json"
    path.write_text(json.dumps({"enumeration": {}, "representatives": [first.to_json()]}))
    ran = subprocess.run([sys.executable, str(Path(sanitize_kernels.__file__)), "--run", "--device", "cpu",
                          "--representatives", str(path)], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and "end row_reduction-1 ok" in ran.stdout, ran.stdout + ran.stderr[-2000:]


def _first_generic_tile():
    compilation = ks.ModelProgram("cnn", 13).compile().compilation
    return next(t for t in compilation.tiles if t.kernel.name == "max_pool2d_with_indices_max")


# --- the processes, under a stand-in for compute-sanitizer -------------------------------------

FAKE_TOOL = """\
import os, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer\\nVersion 2099.1.0.0 (build 1) (public-release)")
    sys.exit(0)
if os.environ.get("FAKE_BROKEN"):
    print("========= Error: Unrecognized option", flush=True)
    sys.exit(1)
tool, ids = args[args.index("--tool") + 1], args[args.index("--only") + 1].split(",")
print("========= COMPUTE-SANITIZER", flush=True)
errors = 0
for i in ids:
    print("lamina-sanitize: begin", i, flush=True)
    if i == os.environ.get("FAKE_HANG"):
        time.sleep(60)
    if i == os.environ.get("FAKE_FAULTY"):
        print("========= Invalid __global__ read of size 4 bytes")
        print("=========     at relu+0x10")
        errors += 1
    root = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
    same_lamina = os.path.isfile(os.path.join(root, "lamina", "__init__.py"))
    status = "ok" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1" and same_lamina else "failed"
    if errors and os.environ.get("FAKE_STICKY"):
        status = "failed"
    print("lamina-sanitize: end", i, status, "seconds=0.01 error=0.00e+00 tolerance=1e-04", flush=True)
if tool == "racecheck":
    print(f"========= RACECHECK SUMMARY: {errors} hazards displayed ({errors} errors, 0 warnings)")
else:
    print(f"========= ERROR SUMMARY: {errors} errors")
sys.exit(86 if errors else 0)
"""


@pytest.fixture
def fake_tool(tmp_path):
    path = tmp_path / "compute-sanitizer"
    path.write_text(f"#!{sys.executable}\n" + FAKE_TOOL)
    path.chmod(0o755)
    return str(path)


def _representatives_file(tmp_path, count: int) -> str:
    found = [ks.Representative(f"pointwise-{k}", (("schedule", "pointwise"), ("vector_width", str(k))),
                               ks.SuiteProgram(f"case{k}", "x + 1", (InputSpec("x", (4 * k,), torch.float32),)),
                               "add", 4 * k, 1) for k in range(1, count + 1)]
    path = tmp_path / "representatives.json"
    path.write_text(json.dumps({"enumeration": {}, "representatives": [r.to_json() for r in found]}))
    return str(path)


def _sanitize(tmp_path, fake_tool, *extra):
    out = tmp_path / "out.json"
    code = sanitize_kernels.main(["--sanitize", "memcheck,racecheck", "--representatives",
                                  _representatives_file(tmp_path, 5), "--compute-sanitizer", fake_tool,
                                  "--out", str(out), *extra])
    return code, json.loads(out.read_text())


def test_a_clean_run_takes_one_process_per_tool(tmp_path, fake_tool):
    code, document = _sanitize(tmp_path, fake_tool)
    assert code == 0 and len(document["processes"]) == 2
    assert document["summary"] == {"memcheck": {"clean": 5}, "racecheck": {"clean": 5}}
    entry = document["settings"][0]
    assert entry["memcheck"]["findings"] == 0 and entry["racecheck"]["findings"] == 0
    assert entry["memcheck"]["command"].startswith(fake_tool + " --tool memcheck --error-exitcode 86")
    assert entry["racecheck"]["command"].count("--racecheck-report analysis") == 1
    assert document["command"].startswith("python benchmarks/sanitize_kernels.py --sanitize memcheck,racecheck")
    assert document["command"].endswith("--out benchmarks/results/out.json")
    assert document["tool"] == "Version 2099.1.0.0 (build 1) (public-release)" and entry["shapes"] == "x=4"


def test_a_finding_belongs_to_the_representative_it_was_printed_in(tmp_path, fake_tool, monkeypatch):
    monkeypatch.setenv("FAKE_FAULTY", "pointwise-4")
    code, document = _sanitize(tmp_path, fake_tool)
    verdicts = {e["id"]: e["memcheck"]["verdict"] for e in document["settings"]}
    assert code == 1 and verdicts == {"pointwise-1": "clean", "pointwise-2": "clean", "pointwise-3": "clean",
                                      "pointwise-4": "errors", "pointwise-5": "clean"}
    faulty = document["settings"][3]["memcheck"]
    assert faulty["findings"] == 1 and faulty["tool_found_errors"] and faulty["kernels_named"] == ["relu"]
    assert faulty["first_lines"] == ["Invalid __global__ read of size 4 bytes", "  at relu+0x10"]
    assert document["settings"][4]["memcheck"]["first_lines"] == []
    assert sum(p["tool"] == "memcheck" for p in document["processes"]) == 1
    log = (tmp_path / "out.log").read_text()
    assert log.count("### memcheck, process 1") == 1 and "at relu+0x10" in log


def test_what_failed_after_a_finding_runs_again_in_a_new_process(tmp_path, fake_tool, monkeypatch):
    """As on a GPU where a faulting kernel leaves the CUDA context broken for the rest of the process."""
    monkeypatch.setenv("FAKE_FAULTY", "pointwise-2")
    monkeypatch.setenv("FAKE_STICKY", "1")
    code, document = _sanitize(tmp_path, fake_tool)
    verdicts = {e["id"]: e["memcheck"]["verdict"] for e in document["settings"]}
    assert code == 1 and verdicts == {"pointwise-1": "clean", "pointwise-2": "errors", "pointwise-3": "clean",
                                      "pointwise-4": "clean", "pointwise-5": "clean"}
    memcheck = [p["programs"] for p in document["processes"] if p["tool"] == "memcheck"]
    assert memcheck == [[f"pointwise-{k}" for k in range(1, 6)], ["pointwise-3", "pointwise-4", "pointwise-5"]]


def test_a_hang_is_stopped_and_the_others_still_run(tmp_path, fake_tool, monkeypatch):
    monkeypatch.setenv("FAKE_HANG", "pointwise-2")
    code, document = _sanitize(tmp_path, fake_tool, "--timeout", "3")
    verdicts = {e["id"]: e["memcheck"]["verdict"] for e in document["settings"]}
    assert code == 1 and verdicts["pointwise-2"] == "timeout"
    assert all(v == "clean" for i, v in verdicts.items() if i != "pointwise-2")
    assert document["settings"][1]["memcheck"]["returncode"] is None


def test_a_tool_that_runs_nothing_is_not_halved(tmp_path, fake_tool, monkeypatch):
    monkeypatch.setenv("FAKE_BROKEN", "1")
    code, document = _sanitize(tmp_path, fake_tool)
    assert code == 1 and document["summary"] == {"memcheck": {"failed": 5}, "racecheck": {"failed": 5}}
    assert len(document["processes"]) == 2
    assert document["settings"][0]["memcheck"]["first_lines"] == ["Error: Unrecognized option"]


def test_a_spent_budget_leaves_the_rest_not_run(tmp_path, fake_tool):
    code, document = _sanitize(tmp_path, fake_tool, "--budget", "0")
    assert code == 1 and document["summary"] == {"memcheck": {"not-run": 5}, "racecheck": {"not-run": 5}}


def test_a_process_still_running_when_the_budget_is_spent_is_stopped_and_keeps_what_it_finished(
        tmp_path, fake_tool, monkeypatch):
    """The budget is a wall for the tools' processes, not only for starting new ones: a run that
    must fit the time a GPU is lent still writes its record."""
    monkeypatch.setenv("FAKE_HANG", "pointwise-3")
    started = time.monotonic()
    code, document = _sanitize(tmp_path, fake_tool, "--budget", "4", "--timeout", "50")
    assert time.monotonic() - started < 30
    for tool in ("memcheck", "racecheck"):
        verdicts = {e["id"]: e[tool]["verdict"] for e in document["settings"]}
        assert verdicts == {"pointwise-1": "clean", "pointwise-2": "clean", "pointwise-3": "not-run",
                            "pointwise-4": "not-run", "pointwise-5": "not-run"}
        assert document["settings"][2][tool]["why"] == "--budget spent while it ran"
    assert code == 1


def test_sanitize_needs_known_tools_and_a_file(capsys):
    for argv, message in ((["--sanitize", "memchek", "--out", "x.json"], "the tools are memcheck"),
                          (["--sanitize", "memcheck"], "--sanitize needs --out")):
        with pytest.raises(SystemExit):
            sanitize_kernels.parse_args(argv)
        assert message in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not (shutil.which("compute-sanitizer") or Path("/usr/local/cuda/bin/compute-sanitizer").exists()),
                    reason="compute-sanitizer is not installed")
def test_the_running_example_is_clean_under_memcheck(tmp_path):
    case = next(c for c in builtin_suite() if c.name == "running_example.fp32")
    compiled = ks.compile_program(ks.SuiteProgram.of(case))
    (found,) = ks.representatives([compiled])
    path = tmp_path / "representatives.json"
    path.write_text(json.dumps({"enumeration": {}, "representatives": [found.to_json()]}))
    out = tmp_path / "out.json"
    code = sanitize_kernels.main(["--sanitize", "memcheck", "--representatives", str(path), "--out", str(out)])
    entry = json.loads(out.read_text())["settings"][0]["memcheck"]
    assert code == 0 and entry["verdict"] == "clean", textwrap.indent(json.dumps(entry, indent=1), "  ")
    assert entry["findings"] == 0 and entry["check"] == "ok" and entry["returncode"] == 0


@pytest.mark.gpu
def test_the_few_cases_representatives_pass_their_check_on_the_gpu(few):
    for first, group in sanitize_kernels.runs(few):
        status, detail = sanitize_kernels.run_program(group)
        assert status == "ok", f"{first}: {status} {detail}"

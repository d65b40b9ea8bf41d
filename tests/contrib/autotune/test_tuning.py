"""Tuning on the CPU: the candidates run on the Kernel IR simulator (the reference backend) and a
scripted timer stands in for the GPU's, so that what is measured, checked, recorded and then chosen
can be asserted; a real tuning needs a GPU, and says so."""

import itertools

import pytest
import torch

import lamina
from lamina.contrib.autotune import measure, tuning
from lamina.contrib.autotune.database import TuningDatabase
from lamina.contrib.autotune.policy import database_of
from lamina.core.config import Config
from lamina.core.errors import LaminaError
from lamina.core.plugins import PluginManager


def relu_of_product(x, w):
    return torch.relu(x @ w)


def inputs(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(37, 96, generator=generator), torch.randn(96, 70, generator=generator)


def scripted(*times: float):
    """A timer that runs the call once and reports the next of ``times``, in turn."""
    sequence = itertools.cycle(times)
    return lambda call: (call(), next(sequence))[1]


def each_twice(*times: float):
    """A timer that reports ``times`` as the candidates' times in both of the tuner's passes: in
    order, then in the opposite order."""
    return scripted(*times, *reversed(times))


def compile_it(cache, **settings):
    return lamina.compile(relu_of_product, inputs(), selection="autotune", cache_dir=str(cache), **settings)


def tile_line(compiled, key: str) -> str:
    return next(line.strip() for line in compiled.ir("tile").splitlines() if line.strip().startswith(key + " ="))


def tune(cache, *times: float, candidates: int = 4):
    with tuning.session(candidates=candidates, backend="reference", timer=each_twice(*times), echo=lambda _: None) as s:
        compile_it(cache, program_cache=False)
    return s


def test_the_autotuner_is_loaded_only_where_selected():
    status = {p.name: p.status for p in PluginManager(Config()).plugins}
    assert status["lamina.contrib.autotune"] == "off"
    manager = PluginManager(Config(selection="autotune"))
    assert {p.name: p.status for p in manager.plugins}["lamina.contrib.autotune"] == "loaded"
    assert "autotune" in manager.registry.names("selection_policy")


def test_a_kernel_not_in_the_database_gets_the_cost_models_choice_and_says_so(tmp_path):
    compiled = compile_it(tmp_path)
    default = lamina.compile(relu_of_product, inputs(), cache_dir=str(tmp_path))
    assert tile_line(compiled, "selection") == "selection = autotune: not in the tuning database, so the cost model's choice"
    assert tile_line(compiled, "chosen") == tile_line(default, "chosen")


def test_tuning_measures_the_candidates_and_a_later_compile_takes_the_fastest(tmp_path):
    session = tune(tmp_path, 10.0, 5.0, 7.0, 8.0)
    [(name, entry)] = session.tuned
    assert name == "relu" and entry.winner == 1 and len(entry.candidates) == 4
    assert [c.time_us for c in entry.candidates] == [10.0, 5.0, 7.0, 8.0]
    estimates = [c.estimate_us for c in entry.candidates]
    assert estimates[1:] == sorted(estimates[1:]) and estimates[0] <= min(estimates[1:])

    compiled = compile_it(tmp_path)
    assert tile_line(compiled, "selection") == ("selection = autotune: measured 5.0 us, the cost model's choice "
                                                "10.0 us (fastest of 4)")
    winner = entry.chosen.knobs
    assert f"block {winner['block_m']}x{winner['block_n']}x{winner['block_k']}," in tile_line(compiled, "chosen")
    x, w = inputs(seed=1)
    torch.testing.assert_close(compiled(x, w), relu_of_product(x, w), rtol=1e-5, atol=1e-5)


def test_each_candidate_keeps_the_faster_of_its_two_times_the_second_pass_in_the_opposite_order(tmp_path):
    first_pass, second_pass = (10.0, 5.0, 7.0, 8.0), (9.0, 6.0, 7.5, 4.0)  # the second: last candidate first
    with tuning.session(backend="reference", timer=scripted(*first_pass, *second_pass), echo=lambda _: None) as s:
        compile_it(tmp_path, program_cache=False)
    [(_, entry)] = s.tuned
    assert [c.time_us for c in entry.candidates] == [4.0, 5.0, 6.0, 8.0] and entry.winner == 0


def test_where_the_cost_models_choice_is_fastest_it_is_kept_as_the_cost_model_makes_it(tmp_path):
    tune(tmp_path, 4.0, 5.0, 7.0, 8.0)
    compiled = compile_it(tmp_path)
    assert tile_line(compiled, "selection") == "selection = autotune: the cost model's choice, measured fastest of 4 (4.0 us)"
    assert "pinned: none" in tile_line(compiled, "chosen")


def test_a_candidate_whose_result_differs_is_not_chosen(tmp_path, monkeypatch):
    run = measure.CandidateRuns.run
    calls = itertools.count()

    def second_is_wrong(self, built):
        outputs, time_us = run(self, built)
        return ([o + 1 for o in outputs] if next(calls) == 1 else outputs), time_us

    monkeypatch.setattr(measure.CandidateRuns, "run", second_is_wrong)
    timer = scripted(10.0, 5.0, 7.0, 8.0, 8.0, 7.0, 10.0)  # the second pass times the three that agree
    with tuning.session(backend="reference", timer=timer, echo=lambda _: None) as session:
        compile_it(tmp_path, program_cache=False)
    [(_, entry)] = session.tuned
    assert entry.candidates[1].time_us is None
    assert "differs from the cost model's choice's" in entry.candidates[1].problem
    assert entry.winner == 2


def test_the_configurations_pins_win_over_the_database(tmp_path):
    tune(tmp_path, 10.0, 5.0, 7.0, 8.0)
    compiled = compile_it(tmp_path, knobs={"contraction.block_m": 16, "contraction.block_n": 16})
    assert "its knobs not used: the configuration pins contraction's" in tile_line(compiled, "selection")
    assert "block 16x16x" in tile_line(compiled, "chosen")


def test_an_entry_of_another_lamina_version_is_not_used(tmp_path, monkeypatch):
    tune(tmp_path, 10.0, 5.0, 7.0, 8.0)
    database = database_of(Config(cache_dir=str(tmp_path)))
    monkeypatch.setattr("lamina.contrib.autotune.provenance.__version__", "0.0.1")
    assert len(database.entries()) == 1
    assert "not in the tuning database" in tile_line(compile_it(tmp_path), "selection")


def test_the_program_cache_never_serves_a_program_chosen_before_the_database_changed(tmp_path):
    before = compile_it(tmp_path, program_cache=True)
    assert "not in the tuning database" in tile_line(before, "selection")
    tune(tmp_path, 10.0, 5.0, 7.0, 8.0)
    after = compile_it(tmp_path, program_cache=True)
    assert "measured 5.0 us" in tile_line(after, "selection")


def test_a_kernel_with_one_setting_to_choose_from_is_not_measured(tmp_path):
    session = tune(tmp_path, 10.0, 5.0, candidates=1)
    assert session.tuned == [] and session.untuned == [("relu", "a single setting to choose from")]
    assert TuningDatabase(tmp_path / "tuning.json").entries() == {}


def test_tuning_without_a_gpu_says_it_needs_one(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: tuning would run")
    with pytest.raises(LaminaError, match="tuning measures kernels on a GPU, and none can run here"):
        with tuning.session(echo=lambda _: None):
            compile_it(tmp_path, program_cache=False)


def test_a_kernel_repeated_by_a_models_layers_is_measured_once(tmp_path):
    def two_layers(a, b, w):
        return torch.relu(a @ w), torch.relu(b @ w)

    a, w = inputs()
    b = torch.randn(37, 96)
    with tuning.session(backend="reference", timer=each_twice(10.0, 5.0, 7.0, 8.0), echo=lambda _: None) as s:
        compiled = lamina.compile(two_layers, (a, b, w), selection="autotune", cache_dir=str(tmp_path),
                                  program_cache=False)
    assert len(compiled.compilation.loop.kernels) == 2
    assert [name for name, _ in s.tuned] == [compiled.compilation.loop.kernels[0].name] and s.untuned == []
    notes = [dict(t.knobs)["selection"] for t in compiled.compilation.tiles]
    assert notes == ["autotune: measured 5.0 us, the cost model's choice 10.0 us (fastest of 4)"] * 2
    with tuning.session(candidates=1, backend="reference", echo=lambda _: None) as s:
        lamina.compile(two_layers, (a, b, w), selection="autotune", cache_dir=str(tmp_path / "other"),
                       program_cache=False)
    assert s.untuned == [(compiled.compilation.loop.kernels[0].name, "a single setting to choose from")]


def test_a_kernel_that_l2_would_hold_is_timed_rotating_among_input_sets_that_overflow_it():
    kernel = lamina.compile(relu_of_product, inputs()).compilation.loop.kernels[0]
    moved = (37 * 96 + 96 * 70 + 37 * 70) * 4
    assert measure.input_sets(kernel, l2_bytes=moved) == 2
    assert measure.input_sets(kernel, l2_bytes=10 * moved) == 20
    assert measure.input_sets(kernel, l2_bytes=moved // 4) == 1  # a set alone overflows it
    assert measure.input_sets(kernel, l2_bytes=50 * 2**20) == 1  # too small to be timed cold


def test_a_timed_call_runs_the_candidate_on_every_input_set_and_counts_one_of_them(tmp_path, monkeypatch):
    monkeypatch.setattr(measure, "input_sets", lambda kernel, l2_bytes: 3)
    calls = []

    def timer(call):
        results = call()
        calls.append(results)
        return 30.0

    with tuning.session(candidates=2, backend="reference", timer=timer, echo=lambda _: None) as s:
        compile_it(tmp_path, program_cache=False)
    [(_, entry)] = s.tuned
    assert [c.time_us for c in entry.candidates] == [10.0, 10.0]
    (first, *_), (second, *_), (third, *_) = calls[0]
    assert not torch.equal(first, second) and not torch.equal(second, third)

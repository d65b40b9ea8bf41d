"""The program fuzzer's fixed seeds: random programs of every supported kind of op, in float32,
bfloat16 and int32, compiled and run on the simulator, must match eager PyTorch.

A failure prints the program as a script; ``python -m lamina.testing.fuzz --seed S`` runs it again.
"""

import pytest
import torch

from lamina.testing.fuzz import DTYPES, generate, judge, run

CI_SEEDS = range(240)
"""80 programs of each dtype: the seed chooses the dtype, ``seed % 3`` in the order of DTYPES."""


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fuzzed_program_matches_eager(seed):
    outcome = run(generate(seed))
    assert outcome.kind == "passed", f"{outcome.kind}: {outcome.detail}\n\n{outcome.program.repro()}"


def test_a_program_is_reproducible_from_its_seed():
    first, again = generate(1234), generate(1234)
    assert first.source == again.source and first.input_lines == again.input_lines
    for a, b in zip(first.inputs(), again.inputs()):
        assert torch.equal(a, b)
    assert generate(1235).source != first.source


def test_the_seeds_cover_every_dtype_and_kind_of_op():
    programs = [generate(seed) for seed in CI_SEEDS]
    assert {p.dtype for p in programs} == set(DTYPES)
    source = "\n".join(p.source for p in programs)
    for spelling in ("@", "torch.bmm(", ".sum(", ".amax(", ".max(", "torch.softmax(", ".reshape(", ".permute(",
                     ".expand(", "torch.cat(", ".index_select(", "torch.gather(", ".argmax(", "torch.where(",
                     "torch.exp(", "torch.log(", " // ", " % ", ":2]"):
        assert spelling in source, spelling


def test_inputs_are_never_zero():
    for seed in range(30):
        for tensor in generate(seed).inputs():
            if tensor.is_floating_point() or tensor.dtype == torch.int32:
                assert bool((tensor != 0).all())


def test_the_judge_allows_eager_bf16s_own_error_and_no_more():
    reference = torch.linspace(-3, 3, 50, dtype=torch.float64)
    eager = (reference + 0.02).to(torch.bfloat16)
    assert judge([(reference + 0.03).to(torch.bfloat16)], [eager], [reference]) == ""
    assert "relative error" in judge([(reference + 0.2).to(torch.bfloat16)], [eager], [reference])


def test_the_judge_wants_integers_exact_and_dtypes_equal():
    want = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert judge([want.clone()], [want], [want]) == ""
    assert "differ" in judge([want + torch.tensor([0, 1, 0], dtype=torch.int32)], [want], [want])
    assert "int64" in judge([want.long()], [want], [want])


def test_a_wrong_result_and_a_crash_are_reported(monkeypatch):
    import lamina

    program = generate(3)
    monkeypatch.setattr(lamina, "compile", lambda fn, inputs: lambda *args: tuple(t * 1.01 for t in fn(*args)))
    assert run(program).kind == "mismatched"

    def crash(fn, inputs):
        raise lamina.LaminaError("planted")

    monkeypatch.setattr(lamina, "compile", crash)
    outcome = run(program)
    assert outcome.kind == "crashed" and "planted" in outcome.detail


def test_the_command_prints_progress_a_summary_and_a_program(capsys):
    from lamina.testing.fuzz.__main__ import main

    assert main(["--seeds", "3", "--start", "7", "--dtype", "int32", "--every", "2"]) == 0
    printed = capsys.readouterr().out
    assert "[2/3] 2 passed" in printed
    assert "seeds 7..9: 3 programs, 3 passed, 0 mismatched, 0 crashed, 0 refused, 0 invalid" in printed
    assert main(["--seed", "7"]) == 0
    printed = capsys.readouterr().out
    assert generate(7).source in printed and "seed 7: passed" in printed

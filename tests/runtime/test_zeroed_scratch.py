"""A call's zeroed scratch (the counters of the blocks that finished) comes from one buffer zeroed
once: one fill for the program, not one per kernel that counts its blocks."""

import torch
import torch.nn.functional as F

import lamina
from lamina.bench.measure import float64_reference, relative_error
from lamina.runtime import program_runner


def two_layers_of_decoding(q, k1, v1, k2, v2):
    """Two decoding steps' attentions, each splitting its keys over blocks that count themselves."""
    first = F.scaled_dot_product_attention(q, k1, v1, enable_gqa=True)
    return F.scaled_dot_product_attention(first, k2, v2, enable_gqa=True)


def inputs():
    torch.manual_seed(0)
    q = torch.randn(1, 8, 1, 64, dtype=torch.bfloat16)
    return (q, *(torch.randn(1, 2, 700, 64, dtype=torch.bfloat16) for _ in range(4)))


def compiled():
    return lamina.compile(two_layers_of_decoding, inputs(), target="sm_90",
                          knobs={"attention_decode": {"keys_per_block": 128}})


def test_each_launch_gets_its_own_aligned_piece_of_one_zeroed_buffer():
    runner = compiled().runner(torch.device("cpu"))
    pieces = runner._zeroed_scratch({})
    counters = [(k, p.name) for k, kernel in enumerate(runner.kernels.kernels) for p in kernel.params
                if p.scratch and p.zeroed]
    assert len(counters) == 2 and sorted(pieces) == sorted(counters)
    storage = {t.untyped_storage().data_ptr() for t in pieces.values()}
    assert len(storage) == 1
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in pieces.values())
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    assert all(start % program_runner.INPUT_ALIGNMENT == 0 for start, _ in spans)
    assert all(bool((t == 0).all()) for t in pieces.values())


def test_one_fill_for_the_call_and_every_call_right(monkeypatch):
    program = compiled()
    args = inputs()
    shared, alone = [], []
    share, allocate = program_runner.ProgramRunner._zeroed_scratch, program_runner.ProgramRunner._scratch
    monkeypatch.setattr(program_runner.ProgramRunner, "_zeroed_scratch",
                        lambda self, values: shared.append(1) or share(self, values))
    monkeypatch.setattr(program_runner.ProgramRunner, "_scratch",
                        lambda self, param, values: alone.append(param) or allocate(self, param, values))
    reference = float64_reference(two_layers_of_decoding, args)
    for _ in range(2):  # the counters the first call left behind are not the second's
        shared.clear(), alone.clear()
        assert relative_error(program(*args), reference) <= 1.25 * relative_error(
            two_layers_of_decoding(*args), reference) + 1e-3
        assert len(shared) == 1 and alone and not any(param.zeroed for param in alone)


def test_scratch_too_large_to_share_is_allocated_for_its_launch(monkeypatch):
    monkeypatch.setattr(program_runner, "SHARED_ZEROED_BYTES", 0)
    runner = compiled().runner(torch.device("cpu"))
    assert runner._zeroed_scratch({}) == {}
    args = inputs()
    reference = float64_reference(two_layers_of_decoding, args)
    assert relative_error(compiled()(*args), reference) <= 1.25 * relative_error(
        two_layers_of_decoding(*args), reference) + 1e-3

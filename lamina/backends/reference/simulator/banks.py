"""Shared-memory bank conflicts of one warp-wide access, counted for every warp at once.

Shared memory has 32 banks of 4-byte words; word ``w`` lives in bank ``w % 32``. A warp's
access is served in wavefronts: each bank delivers one distinct word per wavefront (lanes
that read the same word share it), so an access takes as many wavefronts as the busiest
bank has distinct words, and every wavefront beyond the first is a conflict. Accesses wider
than 4 bytes per lane are served in phases of 128 bytes (half warps for 8 bytes, quarter
warps for 16), each phase counted on its own, as the hardware does.
"""

from __future__ import annotations

import torch

BANKS = 32
PHASE_BYTES = BANKS * 4
_NO_WORD = 1 << 62


def lanes_per_phase(bytes_per_lane: int) -> int:
    return 32 if bytes_per_lane <= 4 else max(1, PHASE_BYTES // bytes_per_lane)


def count_conflicts(phase: torch.Tensor, first_word: torch.Tensor, words_per_lane: int, phases: int) -> int:
    """Extra wavefronts of an access: lane ``i`` belongs to phase ``phase[i]`` (``0 <= phase < phases``)
    and touches ``words_per_lane`` consecutive words from ``first_word[i]``."""
    if first_word.numel() == 0:
        return 0
    if words_per_lane > 1:
        steps = torch.arange(words_per_lane)
        words = (first_word.unsqueeze(1) + steps).reshape(-1)
        phase = phase.unsqueeze(1).expand(-1, words_per_lane).reshape(-1)
    else:
        words = first_word
    slot = phase * BANKS + (words & (BANKS - 1))
    slots = phases * BANKS
    lowest = torch.full((slots,), _NO_WORD, dtype=torch.int64).scatter_reduce_(0, slot, words, "amin")
    highest = torch.full((slots,), -1, dtype=torch.int64).scatter_reduce_(0, slot, words, "amax")
    shared_bank = highest > lowest
    if not bool(shared_bank.any()):
        return 0
    # Some bank holds two distinct words: count distinct words per bank in those phases only.
    conflicted = shared_bank.view(phases, BANKS).any(1)
    keep = conflicted.index_select(0, phase).nonzero().squeeze(1)
    words = words.index_select(0, keep)
    phase = phase.index_select(0, keep)
    span = int(words.max()) + 1
    distinct = torch.unique(phase * span + words)
    distinct_phase = torch.div(distinct, span, rounding_mode="floor")
    distinct_word = distinct - distinct_phase * span
    per_bank = torch.bincount(distinct_phase * BANKS + (distinct_word & (BANKS - 1)), minlength=slots)
    wavefronts = per_bank.view(phases, BANKS).amax(1)
    return int((wavefronts - 1).clamp(min=0).sum())

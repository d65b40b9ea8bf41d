"""Greedy generation as users run it, timed token by token.

``model.generate`` with a static key-value cache (``cache_implementation="static"``) or the default
one that grows at each step, the
model's ``forward`` replaced by a compiled one as the ``transformers`` documentation does it,
or left to ``transformers``, which compiles its decoding step with
``torch.compile(mode="reduce-overhead")`` by itself when the cache is static and the model on a
GPU (``disable_compile`` turns that off for the other contenders), ``min_new_tokens`` equal to ``max_new_tokens`` so that every contender makes as many tokens
(random weights reach the end-of-text token by chance). The first call compiles; the second
is timed: a streamer notes when each token is there (``generate`` waits for every token to
decide whether to stop, so noting it costs nothing), which gives the time to the first token
(the prompt's forward pass) and the decoding rate after it.
"""

from __future__ import annotations

import time
from typing import Callable

import attrs
import torch

from lamina.core.errors import LaminaError


class _TokenClock:
    """A ``generate`` streamer that notes the time of each ``put``: the prompt, then each new token."""

    def __init__(self, device: torch.device):
        self.device = device
        self.started = 0.0
        self.times: list[float] = []

    def start(self) -> None:
        self.times.clear()
        self.started = time.perf_counter()

    def put(self, value) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


@attrs.frozen
class Generated:
    """One contender's greedy generation: its tokens and logits, and how long it took."""

    name: str
    tokens: torch.Tensor
    """The new tokens, (batch, new tokens)."""
    logits: torch.Tensor
    """The logits of each new token, (new tokens, batch, vocabulary), float32."""
    first_call_s: float
    """The first ``generate`` call: compiling (for a compiled contender) and generating."""
    first_token_s: float
    """From the timed call to its first new token: the prompt's forward pass and a token."""
    decode_s: float
    """From the first new token to the last."""
    compiled: int | None = None
    """Programs compiled during both calls, where the contender counts them."""

    @property
    def tokens_per_second(self) -> float:
        """New tokens after the first (of every sequence of the batch) per second of decoding."""
        batch, new = self.tokens.shape
        return batch * (new - 1) / self.decode_s if new > 1 and self.decode_s > 0 else float("nan")


CACHES = {"static": "static", "dynamic": None}
"""``--cache``'s choices, as ``generate``'s ``cache_implementation``: None is transformers' default
cache, which grows by a token at each step."""


def generate_timed(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int, name: str,
                   forward: Callable | None = None, count: Callable[[], int] | None = None,
                   transformers_compiles: bool = False, cache: str = "static") -> Generated:
    """``model.generate(ids)`` greedy with a ``cache`` (a key of ``CACHES``), ``new_tokens`` tokens,
    with ``forward`` (a compiled ``model.forward``) in place of the model's own where given, and with
    the decoding step compiled by ``transformers`` only where ``transformers_compiles``; ``count()``
    says how many programs were compiled so far."""
    if new_tokens < 1:
        raise LaminaError(f"generating needs at least 1 new token, not {new_tokens}")
    clock = _TokenClock(ids.device)
    settings = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, cache_implementation=CACHES[cache], return_dict_in_generate=True,
                    output_logits=True, pad_token_id=0, streamer=clock, disable_compile=not transformers_compiles)
    compiled_before = count() if count is not None else 0
    if forward is not None:
        model.forward = forward
    try:
        with torch.no_grad():
            clock.start()
            model.generate(ids, **settings)
            first_call_s = clock.times[-1] - clock.started
            clock.start()
            out = model.generate(ids, **settings)
    finally:
        if forward is not None:
            del model.forward
    times = clock.times
    return Generated(
        name=name,
        tokens=out.sequences[:, ids.shape[1]:],
        logits=torch.stack([step.float() for step in out.logits]),
        first_call_s=first_call_s,
        first_token_s=times[1] - clock.started,
        decode_s=times[-1] - times[1],
        compiled=count() - compiled_before if count is not None else None,
    )


@attrs.frozen
class Divergence:
    """The first token where two greedy generations part, and how far their logits are there."""

    step: int
    """Counted from 0, the first new token."""
    row: int
    token: int
    expected_token: int
    logits_difference: float
    """The largest difference between the two logits at that token, over the vocabulary."""
    expected_margin: float
    """How much the expected logits prefer their token to the other one."""

    def describe(self, name: str, expected_name: str) -> str:
        return (f"first differ at new token {self.step + 1} of sequence {self.row}: {name} {self.token}, "
                f"{expected_name} {self.expected_token}; the logits there differ by at most "
                f"{self.logits_difference:.3g}, where {expected_name}'s prefer their token by {self.expected_margin:.3g}")


def first_divergence(got: Generated, expected: Generated) -> Divergence | None:
    """Where ``got``'s tokens first differ from ``expected``'s (every token after that follows a
    different text, so only the first says anything of the logits), or None."""
    differ = (got.tokens != expected.tokens).nonzero()
    if differ.numel() == 0:
        return None
    step = int(differ[:, 1].min())
    row = int(differ[differ[:, 1] == step][0, 0])
    token, expected_token = int(got.tokens[row, step]), int(expected.tokens[row, step])
    ours, theirs = got.logits[step, row], expected.logits[step, row]
    return Divergence(step=step, row=row, token=token, expected_token=expected_token,
                      logits_difference=float((ours - theirs).abs().max()),
                      expected_margin=float(theirs[expected_token] - theirs[token]))

"""What a model's forward pass is checked and measured against: eager results at a wider
type on the same weights, and the GPU memory that the pass allocates."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import attrs
import torch

from lamina.models.builder import CausalLMLogits, cast_floating_state


def eager_at(model: torch.nn.Module, inputs: Mapping[str, Any], dtype: torch.dtype) -> Any:
    """``model(**inputs)`` run eagerly with its floating state and floating inputs cast to
    ``dtype`` (the model is left as it was)."""
    wide = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}
    with cast_floating_state(model, dtype), torch.no_grad():
        return model(**wide)


def reference_dtype(model: CausalLMLogits, dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """float64 for a float32 model (float32 where a float64 copy would not fit on the GPU), else float32."""
    if dtype != torch.float32:
        return torch.float32
    if device.type == "cuda":
        elements = sum(t.numel() for t in (*model.parameters(), *model.buffers()) if t.is_floating_point())
        free, _ = torch.cuda.mem_get_info(device)
        if elements * 8 > 0.8 * free:
            return torch.float32
    return torch.float64


def reference_logits(model: CausalLMLogits, ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.dtype]:
    """Eager PyTorch's logits for ``ids`` at the reference type of a ``dtype`` model, and that type."""
    wider = reference_dtype(model, dtype, ids.device)
    with cast_floating_state(model, wider), torch.no_grad():
        return model(ids), wider


@attrs.frozen
class PeakMemory:
    """GPU memory of one call: allocated before it (weights, inputs) and the peak during it, in bytes."""

    before: int
    peak: int

    @property
    def above_before(self) -> int:
        return self.peak - self.before


def peak_memory(fn: Callable, ids: torch.Tensor) -> tuple[torch.Tensor, PeakMemory]:
    """``fn(ids)`` and the GPU memory that PyTorch's allocator held during the call."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = fn(ids)
    torch.cuda.synchronize()
    return out, PeakMemory(before=before, peak=torch.cuda.max_memory_allocated())

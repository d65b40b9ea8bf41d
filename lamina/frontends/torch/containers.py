"""What a program takes and returns beyond tensors: nested arguments, and the containers of
the libraries models come from.

lamina's programs work on flat lists of tensors; a call's positional and keyword
arguments are flattened into one (keywords in name order, so that the order a caller
writes them in does not matter), and the flat outputs are put back into what the
program returned (a tuple, a ``ModelOutput``, a Hugging Face ``DynamicCache``).

The program is exported returning the leaves of what it returns, and the structure they
came in is kept aside (``returning_leaves``): rebuilding some containers inside the
trace would run their own code there (a ``DynamicCache`` creates tensors as it is built, which
``run_decompositions`` then fails to account for). Flattening needs the types
registered with PyTorch's pytree. A Hugging Face language model returns its KV cache
in a ``DynamicCache``, which ``transformers`` registers only when asked: it is asked
here, the first time a program is captured after ``transformers`` is imported.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import torch.utils._pytree as pytree


def flatten_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], pytree.TreeSpec]:
    """The leaves of ``(args, kwargs)`` (keywords sorted by name) and the structure they came in."""
    return pytree.tree_flatten((tuple(args), sorted_keywords(kwargs)))


def sorted_keywords(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return dict(sorted(kwargs.items()))


def structured(outputs: Sequence[Any], spec: pytree.TreeSpec | None) -> Any:
    """The flat ``outputs`` in the program's own structure; without one, a tensor or a tuple of them."""
    if spec is not None:
        return pytree.tree_unflatten(list(outputs), spec)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


@contextlib.contextmanager
def returning_leaves(module: torch.nn.Module) -> Iterator[Callable[[], pytree.TreeSpec]]:
    """``module`` made to return the leaves of what it returns, within the block; the function it
    yields gives the structure of the last call's result."""
    own = module.__dict__.get("forward")
    forward = module.forward
    found: dict[str, pytree.TreeSpec] = {}

    @functools.wraps(forward)
    def leaves_of_forward(*args, **kwargs):
        leaves, found["structure"] = pytree.tree_flatten(forward(*args, **kwargs))
        return leaves

    module.forward = leaves_of_forward
    try:
        yield lambda: found["structure"]
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


def register_library_containers() -> None:
    """Teach torch.export the containers of the model libraries already imported."""
    if "transformers" in sys.modules:
        try:
            from transformers.integrations.executorch import register_dynamic_cache_export_support
        except ImportError:  # an older transformers: it returns tuples, which need nothing
            return
        register_dynamic_cache_export_support()

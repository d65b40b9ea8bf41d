"""Captured modules kept on disk, so that a new process compiling the same module for the same
call skips ``torch.export`` (seconds for a language model), as the program cache skips the
pipeline after it.

An entry is keyed by what an export of a module reads: the class of each submodule and the
source files that define it and its bases, each submodule's plain attributes (numbers, strings,
dtypes, a ``transformers`` configuration, functions by their name and source file, small
tensors by value), its parameters' and buffers' names, shapes and dtypes (their values are read
at each call, and the values the program folded are checked at each call as ever), the call's
structure, the shapes and dtypes of its tensors and the values of its numbers, ``dynamic_shapes``,
the ops kept whole, the grad mode, and the code of lamina and its plugins with the versions of
PyTorch and Python. A module that holds anything else, or that has hooks, has no key: it is
captured at every compile. Only modules are kept: a plain function's closure and globals are
what its trace reads, and no key names them.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import sys
import types
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs
import torch

from lamina.frontends.torch.capture import Captured
from lamina.frontends.torch.containers import flatten_call, register_library_containers

FOLDER = "captures"
SMALL_TENSOR_ELEMENTS = 1 << 16
"""An attribute tensor that is no parameter or buffer (a rotary embedding's original frequencies)
enters the key by value up to this size; a larger one leaves the module without a key."""
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_state_dict_hooks")
_BOOKKEEPING = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
                          "_backward_hooks", "_backward_pre_hooks", "_is_full_backward_hook",
                          "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_hooks",
                          "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_state_dict_hooks",
                          "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"})


class _Unnamed(Exception):
    """A value the key cannot name."""


def call_key(program: Any, example_inputs: Sequence[Any], example_kwargs: Mapping[str, Any] | None,
             dynamic_shapes: Any, keep: Sequence[str], code: str) -> str | None:
    """The key of ``program``'s capture for this call, or None where it has none."""
    if not isinstance(program, torch.nn.Module):
        return None
    try:
        parts = [_module_text(name, module) for name, module in program.named_modules(remove_duplicate=False)]
        leaves, structure = flatten_call(example_inputs, example_kwargs or {})
        parts += [repr(structure), _named([_leaf(leaf) for leaf in leaves]), _named(dynamic_shapes)]
    except _Unnamed:
        return None
    parts += [repr(tuple(keep)), code, torch.__version__, sys.version, repr(torch.is_grad_enabled()),
              repr(torch.get_default_dtype())]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def unbound(captured: Captured) -> Captured:
    """``captured`` without its module, as an entry keeps it."""
    return attrs.evolve(captured, constants=captured.constants.for_module(None), module=None)


def bound(captured: Captured, module: torch.nn.Module) -> Captured:
    """A kept capture reading ``module``'s state at each call (the containers of its outputs, such
    as ``transformers``' caches, known to PyTorch's tree functions as capture makes them)."""
    register_library_containers()
    return attrs.evolve(captured, constants=captured.constants.for_module(module), module=module)


def _leaf(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        return ("tensor", tuple(leaf.shape), str(leaf.dtype), leaf.device.type, leaf.requires_grad)
    return leaf


def _module_text(name: str, module: torch.nn.Module) -> str:
    if any(getattr(module, hooks, None) for hooks in _HOOKS):
        raise _Unnamed(f"{name} has hooks")
    attributes = {k: _named(v) for k, v in sorted(vars(module).items()) if k not in _BOOKKEEPING}
    tensors = [(kind, k, tuple(v.shape), str(v.dtype), v.device.type, v.requires_grad)
               for kind, found in (("parameter", module._parameters), ("buffer", module._buffers))
               for k, v in found.items() if v is not None]
    return f"{name}: {_class_text(type(module))} {attributes} {tensors}"


@functools.lru_cache(maxsize=None)
def _class_text(cls: type) -> str:
    """The class and a digest of the files that define it and its bases (their code is what the trace runs)."""
    files = []
    for base in cls.__mro__:
        if base in (torch.nn.Module, object):
            continue
        files.append(_file_digest(inspect.getsourcefile(base) or ""))
    return f"{cls.__module__}.{cls.__qualname__} {hashlib.sha256(''.join(files).encode()).hexdigest()}"


def _file_digest(path: str) -> str:
    if not path:
        raise _Unnamed("code without a source file")
    file = Path(path)
    stat = file.stat()
    return _digest_of(str(file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=None)
def _digest_of(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _named(value: Any) -> str:
    """``value`` as text that names it exactly, or ``_Unnamed``."""
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, enum.Enum)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(_named(v) for v in value)})"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({', '.join(sorted(_named(v) for v in value))})"
    if isinstance(value, torch.nn.Module):  # one held outside the module tree (in a dict of functions)
        return _module_text("", value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_named(k)}: {_named(v)}" for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))) + "}"
    if isinstance(value, torch.Tensor):
        if value.numel() > SMALL_TENSOR_ELEMENTS or value.is_meta:
            raise _Unnamed("a large tensor attribute")
        data = value.detach().cpu().contiguous()
        digest = hashlib.sha256(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest()
        return f"tensor({tuple(value.shape)}, {value.dtype}, {digest})"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
        function = getattr(value, "__func__", value)
        source = inspect.getsourcefile(function) if isinstance(function, types.FunctionType) else None
        return f"{getattr(function, '__module__', '')}.{getattr(function, '__qualname__', '')} " \
               f"{_file_digest(source) if source else ''}"
    if isinstance(value, torch.export.Dim):
        return f"Dim({value.__name__!r}, min={value.min}, max={value.max})"
    if isinstance(value, torch.export.dynamic_shapes._DimHint):
        return repr(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and type(value).__name__.endswith("Config"):  # a transformers configuration
        return f"{type(value).__qualname__}{_named(to_dict())}"
    raise _Unnamed(f"an attribute of type {type(value).__name__}")

"""Registers the CUDA backend and the GPUs it knows, through the same hooks as any plugin."""

from __future__ import annotations

from lamina.backends.cuda.backend import CudaBackend
from lamina.backends.cuda.targets import SM80, SM90
from lamina.core.hookspecs import hookimpl


@hookimpl
def lamina_register_backends(register):
    register(CudaBackend())


@hookimpl
def lamina_register_targets(register):
    register(SM90)
    register(SM80)

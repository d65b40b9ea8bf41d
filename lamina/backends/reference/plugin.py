"""Registers the reference backend through the same hook as any third-party backend."""

from __future__ import annotations

from lamina.backends.reference.backend import ReferenceBackend
from lamina.core.hookspecs import hookimpl


@hookimpl
def lamina_register_backends(register):
    register(ReferenceBackend())

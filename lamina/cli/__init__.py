"""The ``lamina`` command."""

from lamina.cli.main import main

__all__ = ["main"]

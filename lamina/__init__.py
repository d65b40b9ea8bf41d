"""lamina: a pluggable ML compiler from PyTorch programs to CUDA kernels."""

from lamina.api import CompiledFunction, Compiler, compile
from lamina.core.errors import LaminaError
from lamina.core.hookspecs import hookimpl
from lamina.core.version import __version__

__all__ = ["compile", "Compiler", "CompiledFunction", "LaminaError", "hookimpl", "__version__"]

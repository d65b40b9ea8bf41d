"""Errors that lamina shows to people.

Every error says what went wrong, where, and what to do about it. The CLI prints
``LaminaError`` messages without a traceback; anything else is a bug in lamina.
"""

from __future__ import annotations


class LaminaError(Exception):
    """Base class of every error lamina raises on purpose."""


class ConfigError(LaminaError):
    """The configuration (pyproject.toml, lamina.toml, LAMINA_* variables) is invalid."""


class ConfigWarning(UserWarning):
    """A setting, knob or plugin name that does nothing, most likely misspelt."""


class PluginError(LaminaError):
    """A plugin failed to load, validate or register."""


class UnsupportedOpError(LaminaError):
    """The program uses ops that no registered decomposition handles."""

    def __init__(self, ops: list[tuple[str, str]], remedy: str = ""):
        """``remedy``: what else the caller can do, said by the frontend that knows it (through
        ``torch.compile``, run those ops in PyTorch)."""
        self.ops = ops
        lines = [f"{len(ops)} unsupported op(s) in the program:"]
        for op, where in ops:
            lines.append(f"  {op}  at {where}" if where else f"  {op}")
        lines.append(
            "Add a decomposition for each op with a plugin that implements "
            "lamina_register_ops (see docs/plugins.md), or keep it out of the program."
        )
        if remedy:
            lines.append(remedy)
        super().__init__("\n".join(lines))


class VerificationError(LaminaError):
    """An IR failed its verifier: a plugin or pass produced inconsistent IR."""


class InputMismatchError(LaminaError):
    """A compiled function was called with inputs it was not compiled for."""


class SymbolicSizeError(LaminaError):
    """A step of compiling needs a number where a size is known only at run time (``s0``): the
    program is then compiled for the concrete sizes of its call instead."""


class ScheduleError(LaminaError):
    """No schedule could be applied to a loop kernel, or a pinned one does not apply."""


class NoSettingRuns(ScheduleError):
    """A schedule whose ``applies`` accepted a kernel has no setting that can run it, and none of
    its knobs is pinned: the pipeline offers the kernel to the next schedule instead."""


class CompileError(LaminaError):
    """The device compiler (NVRTC) rejected a kernel."""


class DeviceError(LaminaError):
    """The requested device is not available."""


class SimulationError(LaminaError):
    """The Kernel IR simulator found a fault (out-of-bounds access, race, unwritten read)."""

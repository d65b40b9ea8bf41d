"""Registers the ``autotune`` selection policy (loaded where the configuration says
``selection = "autotune"``)."""

from lamina.contrib.autotune.policy import AutotunePolicy
from lamina.core.hookspecs import hookimpl


@hookimpl
def lamina_register_selection_policies(register):
    register(AutotunePolicy())

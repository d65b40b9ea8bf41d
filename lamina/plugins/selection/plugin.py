"""Registers the built-in selection policy."""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.selection.cost_model import CostModelPolicy


@hookimpl
def lamina_register_selection_policies(register):
    register(CostModelPolicy())

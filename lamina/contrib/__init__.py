"""Opt-in plugins shipped with lamina: off unless the configuration asks for what they provide
(``lamina.core.plugins.CONTRIB_PLUGINS``), and registered through the same hooks as any other."""

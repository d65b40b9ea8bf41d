"""lamina's version, kept in the core so that plugin compatibility checks can read it."""

__version__ = "0.1.0"

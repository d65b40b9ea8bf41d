"""The core: IR classes, hook specs, registry, plugin manager, pipeline, config.

It imports nothing from the rest of lamina.
"""

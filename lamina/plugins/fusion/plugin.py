"""Registers the built-in fusion rules.

Inlining runs first so that an epilogue is a single pointwise kernel by the time it
meets its reduction; dead buffers are cleared last.
"""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.fusion.fuse_epilogue_into_reduction import FuseEpilogueIntoReduction
from lamina.plugins.fusion.inline_pointwise_producers import InlinePointwiseProducers
from lamina.plugins.fusion.remove_dead_buffers import RemoveDeadBuffers


@hookimpl
def lamina_register_fusion_rules(register):
    register(InlinePointwiseProducers())
    register(FuseEpilogueIntoReduction())
    register(RemoveDeadBuffers())

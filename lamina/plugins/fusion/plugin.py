"""Registers the built-in fusion rules.

A temporary that holds values widened from a narrower dtype is stored narrow before anything
else, so that the rules after see what a matmul's operands really are. Inlining runs next, so
that an epilogue is a single pointwise kernel by the time it meets its reduction. A reduction
then takes in a pointwise epilogue that reads it at every point (it stays a matmul-shaped
kernel), before one that reads it through a broadcast runs inside its consumer. A program
output that a later kernel reads is stored by that kernel once the reductions have settled; a
reduction that stays a kernel of its own then computes what all its readers compute of each
element (attention's scale and causal mask); a temporary that every reader casts to a narrower
dtype is then stored in that dtype; the elements of a temporary that no reader uses are marked
so that its writer may skip them; dead buffers are cleared last.
"""

from lamina.core.hookspecs import hookimpl
from lamina.plugins.fusion.fuse_epilogue_into_reduction import FuseEpilogueIntoReduction
from lamina.plugins.fusion.fuse_readers_function_into_reduction import FuseReadersFunctionIntoReduction
from lamina.plugins.fusion.fuse_reduction_into_consumer import FuseReductionIntoConsumer
from lamina.plugins.fusion.inline_pointwise_producers import InlinePointwiseProducers
from lamina.plugins.fusion.mark_unread_elements import MarkUnreadElements
from lamina.plugins.fusion.remove_dead_buffers import RemoveDeadBuffers
from lamina.plugins.fusion.store_narrowed_temporaries import StoreNarrowedTemporaries
from lamina.plugins.fusion.store_output_in_consumer import StoreOutputInConsumer
from lamina.plugins.fusion.store_widened_temporaries_narrow import StoreWidenedTemporariesNarrow


@hookimpl
def lamina_register_fusion_rules(register):
    register(StoreWidenedTemporariesNarrow())
    register(InlinePointwiseProducers())
    register(FuseEpilogueIntoReduction())
    register(FuseReductionIntoConsumer())
    register(StoreOutputInConsumer())
    register(FuseReadersFunctionIntoReduction())
    register(StoreNarrowedTemporaries())
    register(MarkUnreadElements())
    register(RemoveDeadBuffers())

"""The built-in Loop IR fusion rules."""

from lamina.plugins.fusion.fuse_epilogue_into_reduction import FuseEpilogueIntoReduction
from lamina.plugins.fusion.fuse_readers_function_into_reduction import FuseReadersFunctionIntoReduction
from lamina.plugins.fusion.fuse_reduction_into_consumer import FuseReductionIntoConsumer
from lamina.plugins.fusion.inline_pointwise_producers import InlinePointwiseProducers
from lamina.plugins.fusion.remove_dead_buffers import RemoveDeadBuffers
from lamina.plugins.fusion.store_output_in_consumer import StoreOutputInConsumer

__all__ = [
    "InlinePointwiseProducers",
    "FuseEpilogueIntoReduction",
    "FuseReductionIntoConsumer",
    "FuseReadersFunctionIntoReduction",
    "StoreOutputInConsumer",
    "RemoveDeadBuffers",
]

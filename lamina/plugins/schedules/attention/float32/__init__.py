"""Float32 attention of many queries as one kernel (FlashAttention-2's loop on ``mma.sync``):
``fuse`` fuses the softmax of the scores into the values' product, ``recognise`` says which fused
kernels this schedule runs, ``tiling`` its knobs, cost and Tile IR, ``writer`` its Kernel IR."""

"""Attention of a few queries against many keys (a decoding step), as one kernel split over the
keys (flash-decoding): ``fuse`` fuses the decomposed attention, ``recognise`` says which fused
kernels this schedule runs, ``tiling`` its knob, cost and Tile IR, ``writer`` its Kernel IR."""

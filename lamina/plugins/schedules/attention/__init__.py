"""Attention in one kernel: the scores' product, the softmax and the values' product fused
(``fuse_attention``), run in one pass over the keys with the online softmax on Hopper's TMA
and wgmma, the scores never leaving the chip (``recognise`` says which kernels, ``tiling`` the
knobs and cost, ``writer`` the Kernel IR)."""

"""Which writer turns a contraction's Tile IR into Kernel IR: the FMA and ``mma.sync``
kernels' (``lowering``) or, where the products run on wgmma, ``wgmma.writer``'s (float32 or
16-bit operands staged by the threads), or on 16-bit operands through TMA,
``wgmma_tma.writer``'s."""

from __future__ import annotations

from lamina.core.errors import ScheduleError
from lamina.core.ir import kernel_ir, tile_ir
from lamina.core.target import Target
from lamina.plugins.schedules.contraction.lowering import ContractionWriter
from lamina.plugins.schedules.contraction.recognise import analyse
from lamina.plugins.schedules.contraction.settings import WGMMA_16_BIT_PRODUCTS, WGMMA_PRODUCTS, settings_of
from lamina.plugins.schedules.contraction.tiling import SCHEDULE_NAME
from lamina.plugins.schedules.contraction.wgmma.writer import SixteenBitWarpgroupWriter, WarpgroupWriter
from lamina.plugins.schedules.contraction.wgmma_tma.tiling import PRODUCTS as TMA_PRODUCTS
from lamina.plugins.schedules.contraction.wgmma_tma.writer import TmaGemmWriter


def lower_contraction(tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
    if tile.schedule != SCHEDULE_NAME:
        raise ScheduleError(
            f"the contraction schedule cannot lower kernel {tile.kernel.name}: it was scheduled by {tile.schedule!r}"
        )
    products = settings_of(tile).products
    writer = {TMA_PRODUCTS: TmaGemmWriter, WGMMA_PRODUCTS: WarpgroupWriter,
              WGMMA_16_BIT_PRODUCTS: SixteenBitWarpgroupWriter}.get(products, ContractionWriter)
    kernel = writer(tile, analyse(tile.kernel, joined=True)).kernel_ir(target.max_shared_bytes_per_block)
    kernel_ir.verify_kernel(kernel, target.max_threads_per_block, target.max_shared_bytes_optin)
    return kernel

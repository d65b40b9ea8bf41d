"""Kernel IR: the CUDA program as data.

``nodes`` holds what every GPU runs, ``hopper`` what only Hopper runs (clusters, the
warpgroup mma, overlapping launches), with its mbarriers in ``hopper_barriers`` and its tensor
memory accelerator in ``hopper_tma``; ``traversal`` walks a kernel, ``printer`` prints it and
``verifier`` checks it.
"""

from lamina.core.ir.kernel_ir.hopper import (
    K_MAJOR,
    MAX_CLUSTER_BLOCKS,
    MAX_PORTABLE_CLUSTER_BLOCKS,
    N_MAJOR,
    OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY,
    REGISTER_VALUES,
    SWIZZLE_ALIGNMENT,
    SWIZZLE_BYTES,
    SWIZZLE_PANEL,
    WARPGROUP_SIZE,
    WGMMA_A_SOURCES,
    WGMMA_B_LAYOUTS,
    WGMMA_K,
    WGMMA_M,
    WGMMA_OPERAND_DTYPES,
    AsyncProxyFence,
    ClusterBarrier,
    ClusterLoad,
    LetNextKernelLaunch,
    WaitForPreviousKernel,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaTf32,
    WgmmaWait,
    register_dtype,
    swizzled_offset,
    wgmma_k,
)
from lamina.core.ir.kernel_ir.hopper_barriers import (
    MAX_TRANSACTION_BYTES,
    MBARRIER_BYTES,
    MBARRIER_STATEMENTS,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
)
from lamina.core.ir.kernel_ir.hopper_checks import barrier_arrays
from lamina.core.ir.kernel_ir.hopper_tma import (
    GLOBAL_ALIGNMENT,
    MAX_BOX,
    TMA_STATEMENTS,
    TMA_SWIZZLES,
    TensorMap,
    TmaLoad,
    TmaStore,
    TmaStoreCommit,
    TmaStoreWait,
)
from lamina.core.ir.kernel_ir.nodes import (
    LOAD_CACHE_HINTS,
    SPACES,
    SPECIALS,
    STORE_CACHE_HINTS,
    VECTOR_BYTES,
    WARP_SIZE,
    Array,
    Assign,
    AtomicAdd,
    Barrier,
    Comment,
    CpAsync,
    CpAsyncCommit,
    CpAsyncWait,
    Declare,
    Divergent,
    For,
    If,
    Kernel,
    Launch,
    Load,
    Mma16,
    MmaTf32,
    PackedPair,
    Param,
    Program,
    ShuffleXor,
    Special,
    Stmt,
    Store,
    Tf32,
    ThreadFence,
    VectorLoad,
    VectorStore,
    block_idx,
    thread_idx,
)
from lamina.core.ir.kernel_ir.printer import format_body, format_expr, format_kernel, format_program
from lamina.core.ir.kernel_ir.traversal import (
    MAX_GRID, expressions, launch_grid, map_body, rename_arrays, statements, with_sizes,
)
from lamina.core.ir.kernel_ir.verifier import verify_kernel, verify_program

__all__ = [
    "LOAD_CACHE_HINTS", "MAX_CLUSTER_BLOCKS", "MAX_PORTABLE_CLUSTER_BLOCKS", "OVERLAPPING_LAUNCH_COMPUTE_CAPABILITY",
    "SPACES", "SPECIALS", "STORE_CACHE_HINTS", "SWIZZLE_ALIGNMENT", "SWIZZLE_BYTES", "VECTOR_BYTES", "WARP_SIZE",
    "WARPGROUP_SIZE", "WGMMA_A_SOURCES", "WGMMA_B_LAYOUTS", "K_MAJOR", "N_MAJOR", "SWIZZLE_PANEL", "WGMMA_K",
    "WGMMA_M", "WGMMA_OPERAND_DTYPES", "REGISTER_VALUES",
    "GLOBAL_ALIGNMENT", "MAX_BOX", "MAX_TRANSACTION_BYTES", "MBARRIER_BYTES", "MBARRIER_STATEMENTS", "TMA_SWIZZLES",
    "MbarrierArrive", "MbarrierInit", "MbarrierWait", "TMA_STATEMENTS", "TensorMap", "TmaLoad", "TmaStore",
    "TmaStoreCommit", "TmaStoreWait", "Wgmma", "register_dtype", "wgmma_k",
    "Array", "Assign", "AsyncProxyFence", "AtomicAdd", "Barrier", "ClusterBarrier", "ClusterLoad", "Comment",
    "CpAsync", "CpAsyncCommit", "CpAsyncWait", "Declare", "Divergent", "For", "If", "Kernel", "Launch",
    "LetNextKernelLaunch",
    "Load", "Mma16", "MmaTf32", "PackedPair", "Param", "Program", "ShuffleXor", "Special", "Stmt", "Store", "Tf32",
    "ThreadFence", "VectorLoad", "VectorStore", "WaitForPreviousKernel", "WgmmaCommit", "WgmmaFence", "WgmmaTf32",
    "WgmmaWait",
    "barrier_arrays", "block_idx", "expressions", "format_body", "format_expr", "format_kernel", "format_program",
    "rename_arrays",
    "launch_grid", "map_body", "MAX_GRID", "statements", "swizzled_offset", "thread_idx", "verify_kernel", "verify_program", "with_sizes",
]

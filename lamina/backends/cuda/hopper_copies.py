"""Hopper's mbarriers and tensor-memory copies (``MbarrierInit``, ``MbarrierArrive``,
``MbarrierWait``, ``TmaLoad``, ``TmaStore`` and its commit and wait) as CUDA: inline PTX in
small helpers, printed only where a kernel uses them.

An mbarrier is a ``long long`` of a shared array, addressed in the shared window
(PTX ISA, "mbarrier.init", "mbarrier.arrive", "mbarrier.test_wait/try_wait"). A wait spins on
``mbarrier.try_wait.parity``, which itself suspends the thread for a while before it answers.
A tensor map travels to the kernel by value, as a 64-byte aligned parameter of 128 bytes
(``__grid_constant__``, so that its address is that of the parameter, which the TMA unit reads:
PTX ISA, "Tensor-map"), and a copy names it with that address
(``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes``; the
coordinates go innermost first, the column before the row). A store is
``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group``, its groups closed by
``cp.async.bulk.commit_group`` and waited for by ``cp.async.bulk.wait_group.read``, which
returns once the copies have read shared memory. In a cluster a copy may land in several
blocks at once (``.multicast::cluster``, a bit per block's rank), and a block may arrive on
another's mbarrier (``mapa`` maps the address into that block's window).
"""

from __future__ import annotations

from lamina.core.ir import kernel_ir as kir

TENSOR_MAP_TYPE = "lamina_tensor_map"
TMA_SHARED_ALIGNMENT = 128
"""The alignment of a TMA copy's shared-memory side (PTX ISA, "cp.async.bulk.tensor")."""

SHARED_ADDRESS_HELPER = """\
__device__ __forceinline__ unsigned lamina_shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}"""

MBARRIER_HELPERS = """\
// mbarriers: init with the arrivals each phase expects (fenced, so that the TMA unit sees the init too); arrive,
// optionally raising the bytes the phase waits for; wait until the phase of a parity has completed.
__device__ __forceinline__ void lamina_mbarrier_init(long long* barrier, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n"
               "fence.mbarrier_init.release.cluster;\\n" :: "r"(lamina_shared_address(barrier)), "r"(arrivals)
               : "memory");
}
__device__ __forceinline__ void lamina_mbarrier_arrive(long long* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: "r"(lamina_shared_address(barrier)) : "memory");
}
__device__ __forceinline__ void lamina_mbarrier_arrive_expect_tx(long long* barrier, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" :: "r"(lamina_shared_address(barrier)),
               "r"(bytes) : "memory");
}
__device__ __forceinline__ void lamina_mbarrier_wait(long long* barrier, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\\n.reg .pred p;\\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, p;\\n}\\n"
                 : "=r"(done) : "r"(lamina_shared_address(barrier)), "r"(parity) : "memory");
  } while (!done);
}"""

TMA_HELPERS = """\
// A tensor map as the driver encodes it (cuTensorMapEncodeTiled): 128 opaque bytes, 64-byte aligned.
struct __align__(64) lamina_tensor_map {
  unsigned long long opaque[16];
};
// One thread's TMA copy of the box at (row, column) of the tensor into shared memory at `dst`, its bytes completing
// on `barrier`; the coordinates go innermost first.
__device__ __forceinline__ void lamina_tma_load_2d(void* dst, const lamina_tensor_map* map, int row, int column,
                                                   long long* barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\\n"
               :: "r"(lamina_shared_address(dst)), "l"(map), "r"(column), "r"(row), "r"(lamina_shared_address(barrier))
               : "memory");
}"""

TMA_MULTICAST_HELPER = """\
// The same copy landing at `dst` and completing on `barrier` in each block of the cluster whose rank is a bit of
// `blocks`.
__device__ __forceinline__ void lamina_tma_load_2d_multicast(void* dst, const lamina_tensor_map* map, int row,
                                                             int column, long long* barrier, unsigned short blocks) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;\\n"
               :: "r"(lamina_shared_address(dst)), "l"(map), "r"(column), "r"(row), "r"(lamina_shared_address(barrier)),
                  "h"(blocks) : "memory");
}"""

REMOTE_ARRIVE_HELPER = """\
// An arrival on the mbarrier at `barrier`'s place in the block of the cluster of rank `rank`, with the arrival's
// default order (release at the block's scope): it says that this thread's wgmma have read a stage, which the other
// block's copies may then refill, and needs no fence of the cluster's memory (a `.release.cluster` arrival made
// each consumer warp wait on one per k-tile: experiments/gemm_clusters/).
__device__ __forceinline__ void lamina_mbarrier_arrive_in_block(long long* barrier, unsigned rank) {
  asm volatile("{\\n.reg .b32 remote;\\nmapa.shared::cluster.u32 remote, %0, %1;\\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\\n}\\n"
               :: "r"(lamina_shared_address(barrier)), "r"(rank) : "memory");
}"""

TMA_STORE_HELPER = """\
// One thread's TMA copy of a box from shared memory at `src` to the tensor at (row, column), in its open bulk group;
// the elements outside the tensor are not written.
__device__ __forceinline__ void lamina_tma_store_2d(const lamina_tensor_map* map, int row, int column, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\\n"
               :: "l"(map), "r"(column), "r"(row), "r"(lamina_shared_address(src)) : "memory");
}"""

TMA_STORE_COMMIT = 'asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");'

_STATEMENTS = (*kir.MBARRIER_STATEMENTS, *kir.TMA_STATEMENTS)


def uses_hopper_copies(kernel: kir.Kernel) -> bool:
    """Whether the kernel has tensor maps or mbarriers, which only Hopper and later GPUs have."""
    return bool(kernel.tensor_maps) or any(isinstance(s, _STATEMENTS) for s in kir.statements(kernel.body))


def helpers(kernel: kir.Kernel) -> list[str]:
    """The helpers the kernel's mbarrier and TMA statements call, in the order they build on each other."""
    statements = list(kir.statements(kernel.body))
    tma = bool(kernel.tensor_maps) or any(isinstance(s, kir.TMA_STATEMENTS) for s in statements)
    barriers = any(isinstance(s, kir.MBARRIER_STATEMENTS) for s in statements)
    stores = any(isinstance(s, kir.TmaStore) for s in statements)
    multicast = any(isinstance(s, kir.TmaLoad) and s.multicast for s in statements)
    remote = any(isinstance(s, kir.MbarrierArrive) and s.rank is not None for s in statements)
    if not (tma or barriers):
        return []
    return ([SHARED_ADDRESS_HELPER] + ([MBARRIER_HELPERS] if barriers else []) + ([TMA_HELPERS] if tma else [])
            + ([TMA_MULTICAST_HELPER] if multicast else []) + ([REMOTE_ARRIVE_HELPER] if remote else [])
            + ([TMA_STORE_HELPER] if stores else []))


def tma_arrays(kernel: kir.Kernel) -> set[str]:
    """The shared arrays that TMA copies fill or read."""
    return ({s.dst for s in kir.statements(kernel.body) if isinstance(s, kir.TmaLoad)}
            | {s.src for s in kir.statements(kernel.body) if isinstance(s, kir.TmaStore)})


def tensor_map_parameter(name: str) -> str:
    return f"const __grid_constant__ {TENSOR_MAP_TYPE} {name}"


def mbarrier_init(barrier: str, arrivals: int) -> str:
    return f"lamina_mbarrier_init(&{barrier}, {arrivals}u);"


def mbarrier_arrive(barrier: str, transaction_bytes: int) -> str:
    if transaction_bytes:
        return f"lamina_mbarrier_arrive_expect_tx(&{barrier}, {transaction_bytes}u);"
    return f"lamina_mbarrier_arrive(&{barrier});"


def mbarrier_arrive_in_block(barrier: str, rank: str) -> str:
    return f"lamina_mbarrier_arrive_in_block(&{barrier}, static_cast<unsigned>({rank}));"


def mbarrier_wait(barrier: str, parity: str) -> str:
    return f"lamina_mbarrier_wait(&{barrier}, static_cast<unsigned>({parity}));"


def tma_load(dst: str, tensor_map: str, row: str, column: str, barrier: str) -> str:
    return (f"lamina_tma_load_2d({dst}, &{tensor_map}, static_cast<int>({row}), static_cast<int>({column}), "
            f"&{barrier});")


def tma_load_multicast(dst: str, tensor_map: str, row: str, column: str, barrier: str, ranks: tuple[int, ...]) -> str:
    blocks = sum(1 << rank for rank in ranks)
    return (f"lamina_tma_load_2d_multicast({dst}, &{tensor_map}, static_cast<int>({row}), static_cast<int>({column}), "
            f"&{barrier}, static_cast<unsigned short>({blocks}));")


def tma_store(tensor_map: str, row: str, column: str, src: str) -> str:
    return f"lamina_tma_store_2d(&{tensor_map}, static_cast<int>({row}), static_cast<int>({column}), {src});"


def tma_store_wait(pending: int) -> str:
    return f'asm volatile("cp.async.bulk.wait_group.read {int(pending)};\\n" ::: "memory");'

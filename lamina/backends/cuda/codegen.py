"""Kernel IR -> CUDA C++ source that a person can read.

One ``extern "C" __global__`` function per kernel, named as the Kernel IR names it.
Index arithmetic is printed as ``int`` when every buffer and array of the kernel has
fewer than 2^31 elements (the common case, and the fast one), else as ``long long``.
Shared arrays are static ``__shared__`` arrays up to the 48 KiB that every launch may
use; past that they are carved out of dynamic shared memory, and the launch asks for
it (``launch_shared_bytes``). An array in the 128-byte swizzle is declared flat, 1024-byte
aligned, and indexed through ``lamina_swizzled_N`` (``lamina.backends.cuda.wgmma``).
Headers are included only when a kernel needs them, so that float32 and integer kernels
compile with NVRTC alone.

The source address of an asynchronous copy is printed as a base element plus the offset
that unrolled loops and constants add, ``&x[base] + (round * 32768 + 32)``: NVRTC then
computes one 64-bit address per base and folds each unrolled copy's offset into the
instruction, where an ``int`` index summed first costs a 64-bit multiply-add per copy
(measured with the contraction's slot counters: ``contraction.lowering``).
"""

from __future__ import annotations

import functools
import math

from lamina.backends.cuda import dependent_launch, hopper_copies, wgmma
from lamina.backends.cuda.expressions import EXP2_HELPER, INT_LIMIT, ExpressionPrinter, nan_propagating_extreme
from lamina.backends.cuda.names import c_name, kernel_c_name
from lamina.backends.cuda.vector_access import register_alignments, vector_copy
from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, index, kernel_ir as kir

STATIC_SHARED_LIMIT = 48 * 1024
"""Shared memory a kernel may declare statically, and use without opting in."""

SHARED_ALIGNMENT = 16
_MAX_SHARED_BYTES = 256 * 1024

_HEADERS = {dtypes.float16: "cuda_fp16.h", dtypes.bfloat16: "cuda_bf16.h"}

_NON_FINITE_DEFINES = """\
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif"""

_CP_ASYNC_HELPER = """\
__device__ __forceinline__ void lamina_cp_async_{bytes}(void* dst, const void* src, bool in_bounds) {{
  const unsigned dst_shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\\n" :: "r"(dst_shared), "l"(src), "r"(in_bounds ? {bytes} : 0) : "memory");
}}"""


_CLUSTER_LOAD_HELPER = """\
__device__ __forceinline__ float lamina_cluster_load(const float* element, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(element));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\\n" : "=r"(remote) : "r"(local), "r"(rank));
  float value;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\\n" : "=f"(value) : "r"(remote) : "memory");
  return value;
}"""

_TF32_HELPER = """\
__device__ __forceinline__ float lamina_tf32(float x) {
  return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}"""

_PAIR_HELPER = """\
// Two floats rounded to {c_type} (to nearest even) in one 32-bit word, `low` in its low half: cvt.rn.{short}x2.f32.
__device__ __forceinline__ int lamina_{short}x2(float low, float high) {{
  {c_type}2 pair = {convert}(low, high);
  return *reinterpret_cast<int*>(&pair);
}}"""
_PAIR_CONVERSIONS = {dtypes.bfloat16: "__floats2bfloat162_rn", dtypes.float16: "__floats2half2_rn"}

_MMA_TF32_HELPER = """\
__device__ __forceinline__ void lamina_mma_tf32(float& d0, float& d1, float& d2, float& d3, float a0, float a1,
                                                float a2, float a3, float b0, float b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), "r"(__float_as_uint(a3)),
        "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}"""

_MMA_16_HELPER = """\
__device__ __forceinline__ void lamina_mma_{short}(float& d0, float& d1, float& d2, float& d3, int a0, int a1, int a2,
                                                int a3, int b0, int b1) {{
  asm("mma.sync.aligned.m16n8k16.row.col.f32.{short}.{short}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, "
      "{{%0, %1, %2, %3}};\\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}}"""

_CLUSTER_BARRIER = ('asm volatile("barrier.cluster.arrive.release;\\n"'
                    ' "barrier.cluster.wait.acquire;\\n" ::: "memory");')
"""Without ``.aligned``: a kernel may reach it just after a branch that only some of a warp's
threads took (a warp-specialised GEMM's producer thread), where the aligned form's promise that
the whole warp executes it together is not the compiler's to keep."""

_FIXED_STATEMENTS = {
    kir.Barrier: "__syncthreads();",
    kir.ClusterBarrier: _CLUSTER_BARRIER,
    kir.CpAsyncCommit: 'asm volatile("cp.async.commit_group;\\n" ::: "memory");',
    kir.WgmmaFence: wgmma.FENCE,
    kir.WgmmaCommit: wgmma.COMMIT,
    kir.AsyncProxyFence: wgmma.PROXY_FENCE,
    kir.ThreadFence: "__threadfence();",
    kir.TmaStoreCommit: hopper_copies.TMA_STORE_COMMIT,
    kir.LetNextKernelLaunch: dependent_launch.LET_NEXT_KERNEL_LAUNCH,
    kir.WaitForPreviousKernel: dependent_launch.WAIT_FOR_PREVIOUS_KERNEL,
}
"""Statements without operands, each always the same line of CUDA."""


def emit_cuda(kernel: kir.Kernel) -> str:
    """The CUDA C++ source of ``kernel``."""
    return _KernelPrinter(kernel).source()


def kernel_symbol(kernel: kir.Kernel) -> str:
    """The name of the kernel's ``__global__`` function in the source and the cubin."""
    return kernel_c_name(kernel.name)


def uses_dynamic_shared(kernel: kir.Kernel, alignments: dict[str, int] | None = None) -> bool:
    """Whether the shared arrays may not fit in static shared memory: a swizzled array's alignment may
    leave a gap before it, which counts too. ``alignments``: ``shared_alignments(kernel)``, if known."""
    alignments = shared_alignments(kernel) if alignments is None else alignments
    gaps = sum(alignment - SHARED_ALIGNMENT for alignment in alignments.values())
    return kernel.shared_bytes + gaps > STATIC_SHARED_LIMIT


def shared_layout(kernel: kir.Kernel, alignments: dict[str, int] | None = None) -> list[tuple[kir.Array, int]]:
    """Each shared array with its byte offset in dynamic shared memory, aligned as it needs (``Array.alignment``)."""
    layout, offset = [], 0
    alignments = shared_alignments(kernel) if alignments is None else alignments
    for array in kernel.arrays:
        if array.space == "shared":
            alignment = alignments[array.name]
            offset = -(-offset // alignment) * alignment
            layout.append((array, offset))
            offset += -(-array.bytes // SHARED_ALIGNMENT) * SHARED_ALIGNMENT
    return layout


def shared_alignments(kernel: kir.Kernel) -> dict[str, int]:
    """What each shared array's start must be aligned to, by name: ``Array.alignment``, and at least
    the 128 bytes of a TMA copy's shared-memory side for an array that one fills or reads. The
    kernel's statements are walked once for all its arrays: a launch asks this of every kernel."""
    if not any(array.space == "shared" for array in kernel.arrays):
        return {}
    copied = hopper_copies.tma_arrays(kernel) if kernel.tensor_maps else set()
    return {array.name: max(array.alignment, hopper_copies.TMA_SHARED_ALIGNMENT) if array.name in copied
            else array.alignment for array in kernel.arrays if array.space == "shared"}


def wide_copy_destinations(kernel: kir.Kernel) -> set[str]:
    """Shared arrays that ``cp.async`` fills, or a vector access reads or writes, more than one
    element at a time: they must start 16-byte aligned."""
    filled = {
        s.dst for s in kir.statements(kernel.body)
        if isinstance(s, kir.CpAsync) and s.bytes > kernel.array(s.dst).dtype.itemsize
    }
    accessed = {s.src if isinstance(s, kir.VectorLoad) else s.dst for s in kir.statements(kernel.body)
                if isinstance(s, (kir.VectorLoad, kir.VectorStore))}
    return filled | {name for name in accessed if isinstance(kernel.array(name), kir.Array)}


def launch_shared_bytes(kernel: kir.Kernel) -> int:
    """The dynamic shared memory a launch of ``kernel`` must ask for."""
    alignments = shared_alignments(kernel)
    if not uses_dynamic_shared(kernel, alignments):
        return kernel.launch.dynamic_shared_bytes
    layout = shared_layout(kernel, alignments)
    array, offset = layout[-1]
    return max(kernel.launch.dynamic_shared_bytes, offset + array.bytes)


def index_type(kernel: kir.Kernel) -> str:
    """``int`` when all index arithmetic of the kernel fits in 32 bits, else ``long long``: always
    where sizes are known only at run time (``kernel.sizes``)."""
    if kernel.sizes:
        return "long long"
    sizes = [p.numel for p in kernel.params] + [math.prod(a.shape) for a in kernel.arrays]
    sizes.append(math.prod(kernel.launch.grid) * math.prod(kernel.launch.block))
    for s in kir.statements(kernel.body):
        for e in kir.expressions(s):
            sizes += [abs(int(n.value)) for n in ex.walk(e)
                      if isinstance(n, ex.Const) and not n.dtype.is_float and n.dtype != dtypes.bool_]
    return "int" if max(sizes) < INT_LIMIT else "long long"


def _data_variables(kernel: kir.Kernel) -> set[str]:
    """Variables whose values come from memory: an int64 one holds data, not an index."""
    values: dict[str, list[ex.Expr]] = {}
    for s in kir.statements(kernel.body):
        if isinstance(s, kir.Declare) and s.init is not None:
            values.setdefault(s.var, []).append(s.init)
        elif isinstance(s, kir.Assign):
            values.setdefault(s.var, []).append(s.value)
    data: set[str] = set()
    changed = True
    while changed:
        changed = False
        for var, exprs in values.items():
            if var not in data and any(_reads_data(e, data) for e in exprs):
                data.add(var)
                changed = True
    return data


def _reads_data(e: ex.Expr, data: set[str]) -> bool:
    return any(isinstance(n, kir.Load) or (isinstance(n, ex.Var) and n.name in data) for n in ex.walk(e))


def _used_dtypes(kernel: kir.Kernel) -> set[dtypes.DType]:
    found = {p.dtype for p in kernel.params} | {a.dtype for a in kernel.arrays}
    for s in kir.statements(kernel.body):
        if isinstance(s, kir.Declare):
            found.add(s.dtype)
        for e in kir.expressions(s):
            found |= {n.dtype for n in ex.walk(e)}
            found |= {n.pair_dtype for n in ex.walk(e) if isinstance(n, kir.PackedPair)}
    return found


class _KernelPrinter:
    def __init__(self, kernel: kir.Kernel):
        kir.verify_kernel(kernel, max_shared_bytes=_MAX_SHARED_BYTES)
        self.kernel = kernel
        self.index_type = index_type(kernel)
        self.symbol = kernel_symbol(kernel)
        self.name = functools.lru_cache(maxsize=None)(lambda n: c_name(n, kernel.name))
        self.var_dtypes, var_types = self._variables()
        array_dtypes = {a.name: a.dtype for a in kernel.params + kernel.arrays}
        swizzled = {a.name: a for a in kernel.arrays if a.swizzle}
        self.expr = ExpressionPrinter(kernel.name, self.index_type, self.name, var_types, array_dtypes, swizzled)
        self.var_types = var_types
        self.cp_async_sizes: set[int] = set()
        self.mma_used = False
        self.sixteen_bit_mma: set[dtypes.DType] = set()
        """The operand types of the ``Mma16`` used: each needs its ``lamina_mma_bf16`` or ``lamina_mma_f16``."""
        self.wgmma_sizes: set[tuple[int, bool]] = set()
        """The n of the wgmma shapes used: each needs its ``lamina_wgmma_tf32_n{n}``."""
        self.sixteen_bit_wgmma: set[tuple[str, int, str, bool]] = set()
        """The operand type, n, B's layout and whether A is in registers of the bf16 and fp16 wgmma used: each
        needs its ``lamina_wgmma_bf16_n{n}``."""
        self.unrolled: list[str] = []
        """The variables of the unrolled loops around the statement being printed."""

    def _variables(self) -> tuple[dict[str, dtypes.DType], dict[str, str]]:
        data = _data_variables(self.kernel)
        var_dtypes: dict[str, dtypes.DType] = {}
        var_types: dict[str, str] = {}
        for s in kir.statements(self.kernel.body):
            if isinstance(s, kir.For):
                var_dtypes[s.var], var_types[s.var] = dtypes.index, self.index_type
            elif isinstance(s, kir.Declare):
                var_dtypes[s.var] = s.dtype
                is_index = s.dtype == dtypes.index and s.var not in data
                var_types[s.var] = self.index_type if is_index else s.dtype.c_type
        return var_dtypes, var_types

    # --- the file ---------------------------------------------------------------

    def source(self) -> str:
        body = self._arrays("  ") + self._body(self.kernel.body, "  ")
        sections = [self._banner()]
        headers = [f"#include <{_HEADERS[d]}>" for d in (dtypes.float16, dtypes.bfloat16) if d in _used_dtypes(self.kernel)]
        if headers:
            sections.append("\n".join(headers))
        if self.expr.non_finite_used:
            sections.append(_NON_FINITE_DEFINES)
        for c_type, name in sorted(self.expr.extremes_used, key=lambda used: (used[0] != "float", used)):
            sections.append(nan_propagating_extreme(c_type, name))
        if self.expr.cluster_loads_used:
            sections.append(_CLUSTER_LOAD_HELPER)
        if self.expr.tf32_used:
            sections.append(_TF32_HELPER)
        if self.expr.exp2_used:
            sections.append(EXP2_HELPER)
        for dtype in sorted(self.expr.pairs_used, key=lambda d: d.name):
            sections.append(_PAIR_HELPER.format(c_type=dtype.c_type, short=dtype.short,
                                                convert=_PAIR_CONVERSIONS[dtype]))
        if self.mma_used:
            sections.append(_MMA_TF32_HELPER)
        for dtype in sorted(self.sixteen_bit_mma, key=lambda d: d.name):
            sections.append(_MMA_16_HELPER.format(short=dtype.short))
        for size in sorted(self.expr.swizzled_sizes):
            sections.append(wgmma.swizzled_helper(size, self.index_type))
        if self.wgmma_sizes or self.sixteen_bit_wgmma:
            sections.append(wgmma.DESCRIPTOR_HELPER)
        for n, registers in sorted(self.wgmma_sizes):
            sections.append(wgmma.mma_helper(n, registers))
        for name in sorted({name for name, *_ in self.sixteen_bit_wgmma}):
            sections.append(wgmma.sixteen_bit_descriptor_helper(dtypes.from_name(name)))
        for name in sorted({name for name, _, layout, _ in self.sixteen_bit_wgmma if layout == kir.N_MAJOR}):
            sections.append(wgmma.n_major_descriptor_helper(dtypes.from_name(name)))
        for name, n, layout, registers in sorted(self.sixteen_bit_wgmma):
            sections.append(wgmma.sixteen_bit_mma_helper(n, dtypes.from_name(name), layout, registers))
        sections += hopper_copies.helpers(self.kernel)
        for size in sorted(self.cp_async_sizes):
            sections.append(_CP_ASYNC_HELPER.format(bytes=size, cache="cg" if size == 16 else "ca"))
        sections.append("\n".join([self._signature() + " {", *body, "}"]))
        return "\n\n".join(sections) + "\n"

    def _banner(self) -> str:
        launch = self.kernel.launch
        grid = ", ".join(map(str, launch.grid))
        text = f"// kernel {self.kernel.name}: grid ({grid}), block {tuple(launch.block)}"
        if launch.cluster != (1, 1, 1):
            text += f", clusters of {tuple(launch.cluster)}"
        dynamic = launch_shared_bytes(self.kernel)
        text += f", dynamic shared memory {dynamic} B" if dynamic else ""
        return text + (", overlapping the previous kernel" if launch.overlaps_previous_kernel else "")

    def _signature(self) -> str:
        params = []
        for p in self.kernel.params:
            const = "" if p.writable else "const "
            params.append(f"{const}{p.dtype.c_type}* __restrict__ {self.name(p.name)}")
        params += [f"const long long {self.name(size)}" for size in self.kernel.sizes]
        params += [hopper_copies.tensor_map_parameter(self.name(m.name)) for m in self.kernel.tensor_maps]
        threads = self.kernel.launch.threads_per_block
        cluster = self.kernel.launch.cluster
        dims = f"__cluster_dims__({cluster[0]}, {cluster[1]}, {cluster[2]}) " if cluster != (1, 1, 1) else ""
        return f'extern "C" __global__ void {dims}__launch_bounds__({threads}) {self.symbol}({", ".join(params)})'

    def _arrays(self, indent: str) -> list[str]:
        lines = []
        shared = shared_alignments(self.kernel)
        if uses_dynamic_shared(self.kernel, shared):
            alignment = max(shared.values(), default=SHARED_ALIGNMENT)
            lines.append(f"{indent}extern __shared__ __align__({alignment}) unsigned char lamina_smem[];")
            for array, offset in shared_layout(self.kernel, shared):
                t, name = array.dtype.c_type, self.name(array.name)
                if len(array.shape) == 1 or array.swizzle:
                    lines.append(f"{indent}{t}* {name} = reinterpret_cast<{t}*>(lamina_smem + {offset});")
                else:
                    rest = "".join(f"[{n}]" for n in array.shape[1:])
                    lines.append(f"{indent}{t} (*{name}){rest} = reinterpret_cast<{t} (*){rest}>(lamina_smem + {offset});")
        else:
            wide = wide_copy_destinations(self.kernel)
            for array in self.kernel.arrays:
                if array.space == "shared":
                    alignment = shared[array.name]
                    alignment = alignment if alignment > SHARED_ALIGNMENT or array.name in wide else None
                    align = f"__align__({alignment}) " if alignment else ""
                    lines.append(f"{indent}__shared__ {align}{self._array_declarator(array)};")
        alignments = register_alignments(self.kernel)
        for array in self.kernel.arrays:
            if array.space == "register":
                align = f"__align__({alignments[array.name]}) " if array.name in alignments else ""
                lines.append(f"{indent}{align}{self._array_declarator(array)};")
        return lines

    def _array_declarator(self, array: kir.Array) -> str:
        """``float x[4][8]``; a swizzled array flat, as its elements are placed by ``lamina_swizzled_N``."""
        shape = (math.prod(array.shape),) if array.swizzle else array.shape
        return f"{array.dtype.c_type} {self.name(array.name)}{''.join(f'[{n}]' for n in shape)}"

    # --- statements ---------------------------------------------------------------

    def _body(self, body, indent: str) -> list[str]:
        lines: list[str] = []
        for s in body:
            lines += self._statement(s, indent)
        return lines

    def _statement(self, s, indent: str) -> list[str]:
        e = self.expr
        if isinstance(s, kir.Declare):
            init = f" = {e.converted(s.init, s.dtype)}" if s.init is not None else ""
            return [f"{indent}{self.var_types[s.var]} {self.name(s.var)}{init};"]
        if isinstance(s, kir.Assign):
            return [f"{indent}{self.name(s.var)} = {e.converted(s.value, self.var_dtypes[s.var])};"]
        if isinstance(s, kir.Store):
            dtype = self.kernel.array(s.array).dtype
            return [f"{indent}{self._element(s.array, s.index)} = {e.converted(s.value, dtype)};"]
        if isinstance(s, kir.For):
            return self._for(s, indent)
        if isinstance(s, kir.If):
            return self._if(s, indent, indent)
        if isinstance(s, kir.Divergent):  # each thread runs it as its group
            return [f"{indent}{{  // each {self.expr.text(s.group)} of {s.count} at its own pace",
                    *self._body(s.body, indent + "  "), f"{indent}}}"]
        if type(s) in _FIXED_STATEMENTS:
            return [f"{indent}{_FIXED_STATEMENTS[type(s)]}"]
        if isinstance(s, kir.CpAsync):
            return self._cp_async(s, indent)
        if isinstance(s, kir.CpAsyncWait):
            return [f'{indent}asm volatile("cp.async.wait_group {int(s.pending)};\\n" ::: "memory");']
        if isinstance(s, (kir.VectorLoad, kir.VectorStore)):
            copy = vector_copy(self.kernel, s, self._element(s.dst, s.dst_index), self._element(s.src, s.src_index))
            return [f"{indent}{copy}"]
        if isinstance(s, kir.MmaTf32):
            self.mma_used = True
            operands = [self._element(s.acc, i) for i in s.acc_index] + [e.converted(v, dtypes.float32) for v in s.a + s.b]
            return [f"{indent}lamina_mma_tf32({', '.join(operands)});"]
        if isinstance(s, kir.Mma16):
            self.sixteen_bit_mma.add(s.operand_dtype)
            operands = [self._element(s.acc, i) for i in s.acc_index] + [self.expr.text(v) for v in s.a + s.b]
            return [f"{indent}lamina_mma_{s.operand_dtype.short}({', '.join(operands)});"]
        if isinstance(s, kir.Wgmma):
            return self._wgmma(s, indent)
        if isinstance(s, kir.MbarrierInit):
            return [f"{indent}{hopper_copies.mbarrier_init(self._element(s.barrier, s.index), s.arrivals)}"]
        if isinstance(s, kir.MbarrierArrive):
            barrier = self._element(s.barrier, s.index)
            if s.rank is not None:
                return [f"{indent}{hopper_copies.mbarrier_arrive_in_block(barrier, self.expr.text(s.rank))}"]
            return [f"{indent}{hopper_copies.mbarrier_arrive(barrier, s.transaction_bytes)}"]
        if isinstance(s, kir.MbarrierWait):
            barrier = self._element(s.barrier, s.index)
            return [f"{indent}{hopper_copies.mbarrier_wait(barrier, self.expr.text(s.parity))}"]
        if isinstance(s, kir.TmaLoad):
            return [f"{indent}{self._tma_load(s)}"]
        if isinstance(s, kir.TmaStore):
            row, column = self.expr.text(s.row), self.expr.text(s.column)
            src = self._box_start(s.src, s.src_index)
            return [f"{indent}{hopper_copies.tma_store(self.name(s.tensor_map), row, column, src)}"]
        if isinstance(s, kir.TmaStoreWait):
            return [f"{indent}{hopper_copies.tma_store_wait(s.pending)}"]
        if isinstance(s, kir.WgmmaWait):
            return [f"{indent}{wgmma.wait(s.pending)}"]
        if isinstance(s, kir.AtomicAdd):
            target = self._element(s.array, (s.index,))
            added = e.converted(s.value, dtypes.int32)
            return [f"{indent}{self._element(s.dst, s.dst_index)} = atomicAdd(&{target}, {added});"]
        if isinstance(s, kir.Comment):
            return [f"{indent}// {line}".rstrip() for line in s.text.splitlines() or [""]]
        raise VerificationError(f"Kernel IR kernel {self.kernel.name} holds a statement the CUDA printer does not know: {s!r}")

    def _element(self, array: str, at) -> str:
        return self.expr.element(array, at)

    def _tma_load(self, s: kir.TmaLoad) -> str:
        if s.multicast:
            return hopper_copies.tma_load_multicast(
                self._box_start(s.dst, s.dst_index), self.name(s.tensor_map), self.expr.text(s.row),
                self.expr.text(s.column), self._element(s.barrier, s.barrier_index), s.multicast)
        return hopper_copies.tma_load(self._box_start(s.dst, s.dst_index), self.name(s.tensor_map),
                                      self.expr.text(s.row), self.expr.text(s.column),
                                      self._element(s.barrier, s.barrier_index))

    def _box_start(self, array: str, at: tuple[ex.Expr, ...]) -> str:
        """The address of a TMA box's first element in shared memory, its unswizzled place for a swizzled array (its
        first row is a multiple of 8, where the swizzle moves nothing)."""
        if self.kernel.array(array).swizzle:
            return self._operand_start(array, at)
        return "&" + self._element(array, at)

    def _wgmma(self, s: kir.Wgmma, indent: str) -> list[str]:
        registers = s.a_from == "registers"
        if s.operand_dtype != dtypes.float32:
            self.sixteen_bit_wgmma.add((s.operand_dtype.name, s.n, s.b_layout, registers))
            accumulators = [self._element(s.acc, i) for i in s.acc_index]
            panel_bytes = None
            if s.b_layout == kir.N_MAJOR:
                b = self.kernel.array(s.b)
                panel_bytes = b.shape[-2] * b.shape[-1] * b.dtype.itemsize
            a = ", ".join(self.expr.text(v) for v in s.a) if registers else self._operand_start(s.a, s.a_index)
            return wgmma.call(s.n, a, self._operand_start(s.b, s.b_index), s.accumulate, accumulators, indent,
                              registers, operand_dtype=s.operand_dtype, panel_bytes=panel_bytes)
        self.wgmma_sizes.add((s.n, registers))
        accumulators = [self._element(s.acc, i) for i in s.acc_index]
        if registers:
            a = ", ".join(self.expr.text(v) for v in s.a)
        else:
            a = self._operand_start(s.a, s.a_index)
        return wgmma.call(s.n, a, self._operand_start(s.b, s.b_index), s.accumulate, accumulators, indent, registers)

    def _operand_start(self, array: str, at: tuple[ex.Expr, ...]) -> str:
        """The address of a wgmma operand's first element, where it would be without the swizzle: the
        descriptor names that place, and the hardware swizzles the addresses it reads."""
        offset = index.linearize(at, self.kernel.array(array).shape)
        return f"&{self.name(array)}[{self.expr.text(offset)}]"

    def _unrolled_address(self, array: str, at: tuple[ex.Expr, ...]) -> str:
        """``&array[at]``, as its base element plus the offset of the unrolled loops and constants."""
        form = index.affine(at[0]) if len(at) == 1 else None
        if form is None:
            return "&" + self._element(array, at)
        moving = {atom: coef for atom, coef in form.terms.items()
                  if isinstance(atom, ex.Var) and atom.name in self.unrolled}
        if not moving and not form.constant:
            return "&" + self._element(array, at)
        base = index.Affine({atom: coef for atom, coef in form.terms.items() if atom not in moving}).to_expr()
        offset = index.Affine(moving, form.constant).to_expr()
        return f"&{self._element(array, (base,))} + ({self.expr.text(offset)})"

    def _for(self, s: kir.For, indent: str) -> list[str]:
        if s.step == 0:
            raise VerificationError(f"Kernel IR kernel {self.kernel.name} has a loop over {s.var} with step 0")
        var = self.name(s.var)
        compare = "<" if s.step > 0 else ">"
        if s.step == 1:
            advance = f"++{var}"
        else:
            advance = f"{var} {'+' if s.step > 0 else '-'}= {abs(s.step)}"
        header = (f"{indent}for ({self.index_type} {var} = {self.expr.text(s.start)}; "
                  f"{var} {compare} {self.expr.text(s.stop)}; {advance}) {{")
        lines = [f"{indent}#pragma unroll"] if s.unroll else []
        if s.unroll:
            self.unrolled.append(s.var)
        body = self._body(s.body, indent + "  ")
        if s.unroll:
            self.unrolled.pop()
        return lines + [header, *body, f"{indent}}}"]

    def _if(self, s: kir.If, indent: str, lead: str) -> list[str]:
        lines = [f"{lead}if ({self.expr.text(s.cond)}) {{", *self._body(s.then, indent + "  ")]
        if len(s.orelse) == 1 and isinstance(s.orelse[0], kir.If):
            nested = self._if(s.orelse[0], indent, f"{indent}}} else ")
            return lines + nested
        if s.orelse:
            lines += [f"{indent}}} else {{", *self._body(s.orelse, indent + "  ")]
        return lines + [f"{indent}}}"]

    def _cp_async(self, s: kir.CpAsync, indent: str) -> list[str]:
        self.cp_async_sizes.add(s.bytes)
        dst = "&" + self._element(s.dst, s.dst_index)
        src = self._unrolled_address(s.src, s.src_index)
        helper = f"lamina_cp_async_{s.bytes}"
        if s.predicate is None:
            return [f"{indent}{helper}({dst}, {src}, true);"]
        return [
            f"{indent}{{",
            f"{indent}  const bool lamina_in_bounds = {self.expr.text(s.predicate)};",
            f"{indent}  {helper}({dst}, lamina_in_bounds ? {src} : {self.name(s.src)}, lamina_in_bounds);",
            f"{indent}}}",
        ]

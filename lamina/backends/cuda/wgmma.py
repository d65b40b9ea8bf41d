"""Hopper's warpgroup mma (``Wgmma``) and the 128-byte swizzle of its operands, as CUDA.

A wgmma reads A and B from shared memory through two 64-bit matrix descriptors, each built
from the address where the operand's first row starts; the hardware applies the swizzle to
the addresses itself, so a descriptor takes the first element's unswizzled place, while
every ordinary access of a swizzled array goes to the swizzled one (``lamina_swizzled_N``).
With A from registers, each thread passes its four values of A as 32-bit registers.
bf16 and fp16 operands take the same descriptors (the layout is in bytes) through an overload
of the descriptor helper for their pointers, and the k16 instruction, whose two last immediates
say that neither operand is transposed: both are K-major, as a TMA with the 128-byte swizzle
writes them (PTX ISA, "Matrix Descriptor Format" and "wgmma.mma_async"). A 16-bit B may also
lie along n (``Wgmma.b_layout``, a row-major ``x @ W`` weight): its descriptor then names
panels of 64 columns, each a run of 128-byte rows of k, and the last immediate transposes it.
The inline PTX is that of ``experiments/tensor_cores/wgmma_experiment.py``, measured on the H200.

wgmma and its fence, commit and wait exist only in ``sm_90a``, Hopper's architecture-specific
target, whose cubins run on sm_90 GPUs and no others: ``kernel_arch`` picks it for the kernels
that need it, and refuses to compile them for anything but Hopper.
"""

from __future__ import annotations

from lamina.backends.cuda.hopper_copies import uses_hopper_copies
from lamina.core.errors import LaminaError
from lamina.core.ir import dtypes, kernel_ir as kir

WGMMA_ARCH = "sm_90a"
HOPPER_ARCHES = ("sm_90", WGMMA_ARCH)

_STATEMENTS = (kir.Wgmma, kir.WgmmaFence, kir.WgmmaCommit, kir.WgmmaWait)
_PER_LINE = 8
"""Accumulators per line of a helper or a call, so that a person can read them."""

FENCE = 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");'
COMMIT = 'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");'
PROXY_FENCE = 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");'

DESCRIPTOR_HELPER = """\
// The matrix descriptor of a wgmma operand in the 128-byte swizzle whose first row starts at `first` (its unswizzled
// place: the hardware swizzles the addresses): the start address in 16-byte units, a leading byte offset of 1 (unused
// by this layout), 1024 bytes from one group of 8 rows of 128 bytes to the next, and the 128-byte swizzle.
__device__ __forceinline__ unsigned long long lamina_wgmma_descriptor(const float* first) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(first));
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4) | (1ull << 16)
       | (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}"""

_SIXTEEN_BIT_DESCRIPTOR_HELPER = """\
__device__ __forceinline__ unsigned long long lamina_wgmma_descriptor(const {c_type}* first) {{
  return lamina_wgmma_descriptor(reinterpret_cast<const float*>(first));
}}"""

_N_MAJOR_DESCRIPTOR_HELPER = """\
// The matrix descriptor of a 16-bit wgmma operand stored along n (N-major) whose first row starts at `first`: panels of
// 64 columns (one 128-byte swizzled row per k), `panel_bytes` apart (the leading byte offset), 1024 bytes from one group
// of 8 rows of k to the next (the stride byte offset), and the 128-byte swizzle.
__device__ __forceinline__ unsigned long long lamina_wgmma_descriptor_n_major(const {c_type}* first,
                                                                              unsigned panel_bytes) {{
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(first));
  return static_cast<unsigned long long>((address & 0x3FFFF) >> 4)
       | (static_cast<unsigned long long>((panel_bytes >> 4) & 0x3FFF) << 16)
       | (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);
}}"""

_SWIZZLED_HELPER = """\
// Element e, row-major, of an array of {size}-byte elements in the 128-byte swizzle: in rows of {row} elements, the
// 16-byte chunk c of row r is stored at chunk c ^ (r % 8).
__device__ __forceinline__ {index} lamina_swizzled_{size}({index} e) {{
  return e ^ (((e >> {row_shift}) & 7) << {chunk_shift});
}}"""


def wait(pending: int) -> str:
    return f'asm volatile("wgmma.wait_group.sync.aligned {int(pending)};\\n" ::: "memory");'


def swizzled_helper(size: int, index_type: str) -> str:
    """``lamina_swizzled_{size}``: where an element of ``size`` bytes of a swizzled array is stored."""
    row, chunk = kir.SWIZZLE_BYTES // size, 16 // size
    return _SWIZZLED_HELPER.format(size=size, row=row, index=index_type, row_shift=row.bit_length() - 1,
                                   chunk_shift=chunk.bit_length() - 1)


def mma_helper(n: int, registers: bool = False) -> str:
    """``lamina_wgmma_tf32_n{n}``: one m64n{n}k8 wgmma on operands that start at ``a`` and ``b``, adding to the
    accumulators (``accumulate`` 1) or replacing them (0). It clobbers memory: it reads shared memory that the
    compiler cannot see through the descriptors. With ``registers``, ``lamina_wgmma_tf32_rs_n{n}`` takes A as
    each thread's four values ``a0`` to ``a3`` instead."""
    count = n // 2
    asm = " " * 15
    outputs = [f'{asm}"{row} "' for row in _rows([f"%{i}" for i in range(count)], ",")]
    if registers:
        name, a_parameters = f"lamina_wgmma_tf32_rs_n{n}", "float a0, float a1, float a2, float a3"
        a_operand = "{" + ", ".join(f"%{count + i}" for i in range(4)) + "}"
        b_operand, predicate = count + 4, count + 5
        inputs = ('"r"(__float_as_uint(a0)), "r"(__float_as_uint(a1)), "r"(__float_as_uint(a2)), '
                  '"r"(__float_as_uint(a3)), "l"(lamina_wgmma_descriptor(b)), "r"(accumulate)')
    else:
        name, a_parameters = f"lamina_wgmma_tf32_n{n}", "const float* a"
        a_operand, b_operand, predicate = f"%{count}", count + 1, count + 2
        inputs = '"l"(lamina_wgmma_descriptor(a)), "l"(lamina_wgmma_descriptor(b)), "r"(accumulate)'
    return "\n".join([
        f"__device__ __forceinline__ void {name}({a_parameters}, const float* b, int accumulate,",
        *_rows([f"float& d{i}" for i in range(count)], ",", "    ", ") {"),
        f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{predicate}, 0;\\n"',
        f'{asm}"wgmma.mma_async.sync.aligned.m{kir.WGMMA_M}n{n}k{kir.WGMMA_K}.f32.tf32.tf32 {{"',
        *outputs,
        f'{asm}"}}, {a_operand}, %{b_operand}, p, 1, 1;\\n}}\\n"',
        *_rows([f'"+f"(d{i})' for i in range(count)], ",", asm + ": ", "", continued=asm + "  "),
        f'{asm}: {inputs}',
        f'{asm}: "memory");',
        "}",
    ])


def sixteen_bit_descriptor_helper(operand_dtype: dtypes.DType) -> str:
    """The descriptor helper for operands of a 16-bit type: the same bits as for float32's."""
    return _SIXTEEN_BIT_DESCRIPTOR_HELPER.format(c_type=operand_dtype.c_type)


def n_major_descriptor_helper(operand_dtype: dtypes.DType) -> str:
    """``lamina_wgmma_descriptor_n_major``: the descriptor of a 16-bit B stored along n in panels of 64 columns."""
    return _N_MAJOR_DESCRIPTOR_HELPER.format(c_type=operand_dtype.c_type)


def sixteen_bit_mma_helper(n: int, operand_dtype: dtypes.DType, b_layout: str = kir.K_MAJOR,
                           registers: bool = False) -> str:
    """``lamina_wgmma_bf16_n{n}`` (or ``_f16_``): one m64n{n}k16 wgmma on bf16 (fp16) operands in shared memory that
    start at ``a`` and ``b``, K-major, adding to float32 accumulators (``accumulate`` 1) or replacing them (0). With
    ``b_layout`` ``n_major``, ``lamina_wgmma_bf16_n{n}_n_major`` reads B stored along n, in panels ``panel_bytes`` apart,
    and asks the tensor cores to transpose it (``imm-trans-b`` 1). With ``registers``, ``lamina_wgmma_bf16_rs_n{n}``
    takes A as each thread's four 32-bit words ``a0`` to ``a3`` of two elements each (``PackedPair``) instead."""
    count, asm, kind, c_type = n // 2, " " * 15, operand_dtype.short, operand_dtype.c_type
    outputs = [f'{asm}"{row} "' for row in _rows([f"%{i}" for i in range(count)], ",")]
    n_major = b_layout == kir.N_MAJOR
    name = f"lamina_wgmma_{kind}{'_rs' if registers else ''}_n{n}" + ("_n_major" if n_major else "")
    panels = " unsigned panel_bytes," if n_major else ""
    b_descriptor = "lamina_wgmma_descriptor_n_major(b, panel_bytes)" if n_major else "lamina_wgmma_descriptor(b)"
    if registers:  # no transposition of A: it is in registers
        a_parameters, a_operand, b_operand, predicate = "int a0, int a1, int a2, int a3", \
            "{" + ", ".join(f"%{count + i}" for i in range(4)) + "}", count + 4, count + 5
        immediates = f"p, 1, 1, {int(n_major)}"
        a_inputs = '"r"(a0), "r"(a1), "r"(a2), "r"(a3)'
    else:
        a_parameters, a_operand, b_operand, predicate = f"const {c_type}* a", f"%{count}", count + 1, count + 2
        immediates = f"p, 1, 1, 0, {int(n_major)}"
        a_inputs = '"l"(lamina_wgmma_descriptor(a))'
    return "\n".join([
        f"__device__ __forceinline__ void {name}({a_parameters}, const {c_type}* b,{panels} int accumulate,",
        *_rows([f"float& d{i}" for i in range(count)], ",", "    ", ") {"),
        f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{predicate}, 0;\\n"',
        f'{asm}"wgmma.mma_async.sync.aligned.m{kir.WGMMA_M}n{n}k16.f32.{kind}.{kind} {{"',
        *outputs,
        f'{asm}"}}, {a_operand}, %{b_operand}, {immediates};\\n}}\\n"',
        *_rows([f'"+f"(d{i})' for i in range(count)], ",", asm + ": ", "", continued=asm + "  "),
        f'{asm}: {a_inputs}, "l"({b_descriptor}), "r"(accumulate)',
        f'{asm}: "memory");',
        "}",
    ])


def call(n: int, a: str, b: str, accumulate: bool, accumulators: list[str], indent: str,
         registers: bool = False, operand_dtype: dtypes.DType = dtypes.float32, panel_bytes: int | None = None
         ) -> list[str]:
    """The lines of a call of ``lamina_wgmma_tf32_n{n}``; ``a`` and ``b`` are the operands' start addresses (with
    ``registers``, of ``lamina_wgmma_tf32_rs_n{n}``, ``a`` the thread's four values of A; with a 16-bit
    ``operand_dtype``, of ``lamina_wgmma_bf16_n{n}`` or ``lamina_wgmma_f16_n{n}``; with ``panel_bytes``, of its
    ``_n_major`` form, B stored along n in panels that far apart)."""
    kind = "tf32" if operand_dtype == dtypes.float32 else operand_dtype.short
    name = f"lamina_wgmma_{kind}_rs_n{n}" if registers else f"lamina_wgmma_{kind}_n{n}"
    b_operands = b if panel_bytes is None else f"{b}, {panel_bytes}"
    name += "" if panel_bytes is None else "_n_major"
    return [f"{indent}{name}({a}, {b_operands}, {int(accumulate)},",
            *_rows(accumulators, ",", indent + "    ", ");")]


def _rows(items: list[str], separator: str, first: str = "", last: str = "", continued: str | None = None) -> list[str]:
    """``items`` joined by ``separator``, ``_PER_LINE`` to a row: the first row after ``first``, the others after
    ``continued`` (``first`` again by default), the last one ending in ``last`` instead of the separator."""
    rows = [", ".join(items[i:i + _PER_LINE]) for i in range(0, len(items), _PER_LINE)]
    lead = [first] + [first if continued is None else continued] * (len(rows) - 1)
    ends = [separator] * (len(rows) - 1) + [last]
    return [f"{lead_}{row}{end}" for lead_, row, end in zip(lead, rows, ends)]


def uses_wgmma(kernel: kir.Kernel) -> bool:
    return any(isinstance(s, _STATEMENTS) for s in kir.statements(kernel.body))


def kernel_arch(kernel: kir.Kernel, arch: str) -> str:
    """The architecture to compile ``kernel`` for on a GPU of ``arch``: ``arch`` itself, or ``sm_90a`` where the
    kernel runs wgmma on Hopper."""
    if uses_hopper_copies(kernel) and arch not in HOPPER_ARCHES:
        raise LaminaError(f"kernel {kernel.name} copies with Hopper's tensor memory accelerator or waits on mbarriers, "
                          f"which only Hopper GPUs (sm_90) have, so it cannot be compiled for {arch}")
    if not uses_wgmma(kernel):
        return arch
    if arch in HOPPER_ARCHES:
        return WGMMA_ARCH
    raise LaminaError(
        f"kernel {kernel.name} runs Hopper's warpgroup mma (wgmma), which only Hopper GPUs (sm_90) have, so it "
        f"cannot be compiled for {arch}; pin contraction.products = \"fma\" or \"mma_sync\" to compile its "
        f"products for {arch} with FMAs or mma.sync"
    )

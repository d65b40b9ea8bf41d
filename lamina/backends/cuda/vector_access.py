"""Vector loads and stores as CUDA C++: one 2-, 4-, 8- or 16-byte access per statement.

Both sides are reinterpreted as an unsigned integer type of the access's size
(``uint4`` for 16 bytes), whatever the element type, so that one instruction moves
all the elements. The register arrays involved are declared aligned to the widest
access made through them, which is what makes that reinterpretation valid; once the
loops around them are unrolled they stay in registers.
"""

from __future__ import annotations

from lamina.core.ir import kernel_ir as kir

VECTOR_TYPES = {2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}


def access_bytes(kernel: kir.Kernel, s: kir.VectorLoad | kir.VectorStore) -> int:
    return s.width * kernel.array(s.src).dtype.itemsize


def register_alignments(kernel: kir.Kernel) -> dict[str, int]:
    """The byte alignment each register array needs for the vector accesses through it."""
    alignments: dict[str, int] = {}
    for s in kir.statements(kernel.body):
        if isinstance(s, (kir.VectorLoad, kir.VectorStore)):
            register = s.dst if isinstance(s, kir.VectorLoad) else s.src
            alignments[register] = max(alignments.get(register, 1), access_bytes(kernel, s))
    return alignments


def vector_copy(kernel: kir.Kernel, s: kir.VectorLoad | kir.VectorStore, dst: str, src: str) -> str:
    """``dst = src`` as one access, ``dst`` and ``src`` being the printed first elements; a
    cache hint is CUDA's ``__ldcg`` (through L2 alone) or ``__stcs`` (streaming, evict first)."""
    vector = VECTOR_TYPES[access_bytes(kernel, s)]
    if s.cache == "l2":
        return f"*reinterpret_cast<{vector}*>(&{dst}) = __ldcg(reinterpret_cast<const {vector}*>(&{src}));"
    if s.cache == "evict_first":
        return f"__stcs(reinterpret_cast<{vector}*>(&{dst}), *reinterpret_cast<const {vector}*>(&{src}));"
    return f"*reinterpret_cast<{vector}*>(&{dst}) = *reinterpret_cast<const {vector}*>(&{src});"

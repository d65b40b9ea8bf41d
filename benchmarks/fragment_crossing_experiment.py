"""Whether reading the next k-tile's first fragments during the last step's arithmetic helps.

The contraction schedule's main loop waits for k-tile ``kt`` at a barrier at the top of
each k-tile, then reads step 0's fragments from shared memory, and its first multiply-adds
wait for them. SGEMM kernels written by hand (and cuBLAS's) move the wait and the barrier
to the second-to-last step of the k-tile and read the next k-tile's first fragments before
the last step's multiply-adds, so that neither the barrier nor that read is waited on
alone. This edits the CUDA of suite cases whose main loop has the plain two-buffer form
into that order (each step's fragments read one step ahead into a second register set)
and times it beside the kernels as compiled, by CUDA-graph replay. With two k-tile
buffers, the copy issued after the barrier writes the buffer whose last fragments every
warp read just before it; four buffers avoid that, but only fit in the 48 KB of static
shared memory with 8-deep k-tiles, so both are timed with ``block_k`` = 8 as well:

    python benchmarks/fragment_crossing_experiment.py
"""

import re
import sys

from edited_cuda import TWO_BUFFER_MAIN_LOOP as LOOP, time_variants

STATIC_SHARED_BYTES = 48 * 1024
SHARED = re.compile(r"__shared__ __align__\(16\) float (\w+)\[2\]\[(\d+)\]\[(\d+)\];")
FRAGMENT = re.compile(r"^      \*reinterpret_cast<uint4\*>\(&(\w+)\[(\d+)\]\) = "
                      r"\*reinterpret_cast<const uint4\*>\(&(\w+)\[kt % 2\]\[kk\]\[(.*)\]\);$")


def crossing(source: str, slots: int) -> str:
    """``source`` with its main loop in the crossing order, or unchanged where the loop has
    another form (three buffers, k-tiles that vary by block, guarded steps) or ``slots``
    buffers would not fit in static shared memory. ``slots`` k-tile buffers: with two, the
    copy issued after the barrier goes into the buffer whose last fragments were read just
    before it; with four, into the one read two k-tiles before."""
    m = LOOP.search(source)
    if m is None or int(m["K"]) < 2:
        return source
    if sum(slots * int(a) * int(b) * 4 for _, a, b in SHARED.findall(source)) > STATIC_SHARED_BYTES:
        return source
    tiles, steps = int(m["T"]), int(m["K"])
    fragments, arithmetic = [], []
    for line in m["body"].splitlines():
        match = FRAGMENT.match(line)
        if match:
            fragments.append(match.groups())
        elif "[kt % 2]" in line:
            return source
        else:
            arithmetic.append(line)
    if not fragments:
        return source
    registers = {f[0] for f in fragments}

    def fill(slot: str, kk: str, into: str) -> str:
        return "".join(f"      *reinterpret_cast<uint4*>(&{reg}[{into}][{i}]) = "
                       f"*reinterpret_cast<const uint4*>(&{tile}[{slot}][{kk}][{at}]);\n"
                       for reg, i, tile, at in fragments)

    steps_text = "\n".join(arithmetic) + "\n"
    for reg in registers:
        steps_text = re.sub(rf"\b{reg}\[(\d+)\]", rf"{reg}[kk % 2][\1]", steps_text)
    copies = m["copies"].replace("(kt + 1) % 2]", f"(kt + 1) % {slots}]")
    loop = (
        "  asm volatile(\"cp.async.wait_group 0;\\n\" ::: \"memory\");\n  __syncthreads();\n"
        f"  {{ const int kt = 0; if (kt + 1 < {tiles}) {{\n{copies}  }} }}\n"
        + fill("0", "0", "0")
        + f"  for (int kt = 0; kt < {tiles}; ++kt) {{\n    #pragma unroll\n"
        f"    for (int kk = 0; kk < {steps}; ++kk) {{\n"
        f"      if (kk < {steps - 1}) {{\n" + fill(f"kt % {slots}", "kk + 1", "(kk + 1) % 2") + "      }\n"
        f"      if (kk == {steps - 2}) {{\n"
        "        asm volatile(\"cp.async.wait_group 0;\\n\" ::: \"memory\");\n        __syncthreads();\n"
        f"        const int kt_next = kt + 1;\n"
        f"        {{ const int kt = kt_next; if (kt + 1 < {tiles}) {{\n{copies}        }} }}\n      }}\n"
        f"      if (kk == {steps - 1} && kt + 1 < {tiles}) {{\n" + fill(f"(kt + 1) % {slots}", "0", "0") + "      }\n"
        + steps_text + "    }\n  }\n")
    source = source[:m.start()] + loop + source[m.end():]
    for reg in registers:
        source = re.sub(rf"(__align__\(16\) float {reg})\[(\d+)\];", r"\1[2][\2];", source)
    for tile in {f[2] for f in fragments}:
        source = source.replace(f"float {tile}[2]", f"float {tile}[{slots}]")
    return source


VARIANTS = [("as compiled", {}, None), ("crossing, 2 buffers", {}, lambda s: crossing(s, 2)),
            ("block_k 8", {"block_k": 8}, None),
            ("block_k 8, crossing, 2 buffers", {"block_k": 8}, lambda s: crossing(s, 2)),
            ("block_k 8, crossing, 4 buffers", {"block_k": 8}, lambda s: crossing(s, 4))]

if __name__ == "__main__":
    time_variants(sys.argv[1:] or ["*.linear_*.s2048.fp32", "*.linear_*.s128.fp32", "*.scores.s2048.fp32"], VARIANTS)

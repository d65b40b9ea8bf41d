"""Whether issuing a k-tile's copies one by one among the steps of the previous k-tile helps.

The contraction schedule's main loop issues all of the next k-tile's copies into shared
memory (16 four-byte ``cp.async`` per thread in 128 x 128 blocks) in one burst after the
barrier at the top of each k-tile, and every warp of the SM issues its burst at about the
same time. cuBLAS's kernels spread them over the steps of the k-tile instead. This edits
the CUDA of suite cases whose main loop has the plain two-buffer form so that copy ``i`` of
``n`` is issued at the start of step ``i * span // n``, the group committed after the last
copy, with ``span`` all of the k-tile's steps, half or a quarter of them (copies issued
late have less time to land before the next k-tile's wait), and times each beside the
kernels as compiled, by CUDA-graph replay:

    python benchmarks/spread_copies_experiment.py
"""

import re
import sys

from edited_cuda import TWO_BUFFER_MAIN_LOOP as LOOP, time_variants

ROUNDS = re.compile(r"      #pragma unroll\n      for \(int round = 0; round < (\d+); \+\+round\) \{\n"
                    r"        (lamina_cp_async_\d+\(.*\);)\n      \}\n")
COMMIT = "      asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"


def spread(source: str, share: float) -> str:
    """``source`` with its copies spread over the first ``share`` of the steps, or unchanged
    where the loop or its copies have another form."""
    m = LOOP.search(source)
    if m is None:
        return source
    tiles, steps = int(m["T"]), int(m["K"])
    copies = []
    rest = m["copies"]
    for rounds in ROUNDS.finditer(m["copies"]):
        copies += [(r, rounds.group(2)) for r in range(int(rounds.group(1)))]
        rest = rest.replace(rounds.group(0), "", 1)
    if rest != COMMIT or not copies:
        return source
    span = max(1, int(steps * share))
    by_step: dict[int, list[str]] = {}
    for i, (r, statement) in enumerate(copies):
        by_step.setdefault(i * span // len(copies), []).append(f"{{ const int round = {r}; {statement} }}")
    issue = "".join(f"        if (kk == {s}) {{ {' '.join(statements)} }}\n" for s, statements in by_step.items())
    loop = (
        f"  for (int kt = 0; kt < {tiles}; ++kt) {{\n"
        "    asm volatile(\"cp.async.wait_group 0;\\n\" ::: \"memory\");\n    __syncthreads();\n"
        f"    #pragma unroll\n    for (int kk = 0; kk < {steps}; ++kk) {{\n"
        f"      if (kt + 1 < {tiles}) {{\n{issue}"
        f"        if (kk == {max(by_step)}) asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n      }}\n"
        + m["body"] + "    }\n  }\n")
    return source[:m.start()] + loop + source[m.end():]


VARIANTS = [("as compiled", {}, None), ("over every step", {}, lambda s: spread(s, 1.0)),
            ("over half", {}, lambda s: spread(s, 0.5)), ("over a quarter", {}, lambda s: spread(s, 0.25))]

if __name__ == "__main__":
    time_variants(sys.argv[1:] or ["*.linear_*.s2048.fp32", "*.linear_*.s128.fp32", "*.scores.s2048.fp32"], VARIANTS)

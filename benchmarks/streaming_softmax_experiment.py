"""Whether the scores' softmax at S = 2048 gains from streaming its reads and writes past L2.

The softmax of the two kernels reads each score once and writes each probability once, 0.94
to 1.07 GB at about 4.0 TB/s, where a ``copy_`` of Qwen's bytes ran at 4.11. This times, by
CUDA-graph replay, the suite's scores at S = 2048 as lamina compiles them, with the softmax's
16-byte loads of the scores marked evict-first (``__ldcs``), and with its 16-byte stores marked
so too (``__stcs``), the CUDA edited before NVRTC compiles it (``edited_cuda.time_variants``:
each variant twice, alternately):

    python benchmarks/streaming_softmax_experiment.py
"""

import re

from edited_cuda import ROW_REDUCTION_START, time_variants

LOAD = re.compile(r"= \*reinterpret_cast<const uint4\*>\(&(p\d+\[[^;]*\])\);")
STORE = re.compile(r"\*reinterpret_cast<uint4\*>\(&(p\d+\[[^;]*\])\) = \*reinterpret_cast<const uint4\*>\(&(\w+\[0\])\);")


def streamed_loads(source: str) -> str:
    if ROW_REDUCTION_START not in source:
        return source
    return LOAD.sub(r"= __ldcs(reinterpret_cast<const uint4*>(&\1));", source)


def streamed_loads_and_stores(source: str) -> str:
    if ROW_REDUCTION_START not in source:
        return source
    return STORE.sub(r"__stcs(reinterpret_cast<uint4*>(&\1), *reinterpret_cast<const uint4*>(&\2));",
                     streamed_loads(source))


if __name__ == "__main__":
    time_variants(["*.scores.s2048.fp32"],
                  [("as emitted", {}, None), ("loads evict-first", {}, streamed_loads),
                   ("loads and stores evict-first", {}, streamed_loads_and_stores)])

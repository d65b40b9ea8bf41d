"""Whether the scores' softmax gains from reading first the rows that the product wrote last.

At S = 2048 the attention scores are two kernels: the product writes 0.47 to 0.54 GB of
scores, and the softmax reads them back. The last 50 MB or so that the product wrote may still
be in L2 when the softmax starts, but the softmax's blocks run in the product's order, the rows
written first, long evicted, read first. This times, by CUDA-graph replay, the suite's scores
at S = 2048 as lamina compiles them and with the softmax's rows taken in reverse (block ``b``
of the row reduction takes row ``gridDim.x - 1 - b``), the CUDA edited before NVRTC compiles
it (``edited_cuda.time_variants``: each variant twice, alternately):

    python benchmarks/reversed_rows_experiment.py
"""

from edited_cuda import ROW_REDUCTION_START, time_variants


def rows_in_reverse(source: str) -> str:
    return source.replace(ROW_REDUCTION_START, "  int row = (int)(gridDim.x - 1 - blockIdx.x);\n")


if __name__ == "__main__":
    time_variants(["*.scores.s2048.fp32", "*.scores_causal.s2048.fp32"],
                  [("as emitted", {}, None), ("rows in reverse", {}, rows_in_reverse)])

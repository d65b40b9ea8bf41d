"""Does measuring the cost model's best settings find faster ones? Three products (``relu(x @ w)``),
each tuned with ``lamina.contrib.autotune`` (six candidates) in a fresh cache directory, then
compiled with the cost model's choice and with the tuned one and both timed as the bench times
(CUDA-graph replay of 20 calls, median). Run on a GPU: ``python experiments/autotune_products/autotune_products.py``."""
import tempfile
import time

import torch

import lamina
from lamina.bench.measure import relative_error, time_cuda_graph
from lamina.contrib.autotune import tuning

CASES = [((2048, 4096), (4096, 4096), torch.bfloat16), ((128, 2048), (2048, 5632), torch.bfloat16),
         ((300, 1000), (1000, 700), torch.float32)]


def relu_of_product(x, w):
    return torch.relu(x @ w)


def main() -> None:
    cache = tempfile.mkdtemp()
    for x_shape, w_shape, dtype in CASES:
        x, w = torch.randn(*x_shape, device="cuda", dtype=dtype), torch.randn(*w_shape, device="cuda", dtype=dtype)
        started = time.perf_counter()
        with tuning.session(candidates=6):
            lamina.compile(relu_of_product, (x, w), selection="autotune", cache_dir=cache, program_cache=False)
        print(f"tuning took {time.perf_counter() - started:.2f} s")
        default = lamina.compile(relu_of_product, (x, w), cache_dir=cache, program_cache=False)
        tuned = lamina.compile(relu_of_product, (x, w), selection="autotune", cache_dir=cache, program_cache=False)
        print([line.strip() for line in tuned.ir("tile").splitlines() if "selection" in line or "chosen" in line])
        reference = relu_of_product(x.double(), w.double())
        for name, compiled in (("cost model", default), ("autotune", tuned)):
            print(name, x_shape, w_shape, dtype, f"{time_cuda_graph(compiled, (x, w), calls_per_graph=20):.2f} us",
                  f"error {relative_error(compiled(x, w), reference):.1e}", flush=True)


if __name__ == "__main__":
    main()

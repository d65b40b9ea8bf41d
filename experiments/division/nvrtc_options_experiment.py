"""``lamina bench`` with extra NVRTC options for every kernel, to measure what an option is worth.

    LAMINA_EXTRA_NVRTC="--prec-div=true" python experiments/division/nvrtc_options_experiment.py --filter '*.silu_mul.s1.*'

The options come after lamina's own (``lamina.backends.cuda.nvrtc``), so they win; the
arguments are ``lamina bench``'s.
"""

import os
import sys

from lamina.backends.cuda import backend

EXTRA = tuple(os.environ.get("LAMINA_EXTRA_NVRTC", "").split())
_build = backend.CudaBackend.__init__


def _with_extra_options(self, cache_dir=None, options=()):
    _build(self, cache_dir, tuple(options) + EXTRA)


backend.CudaBackend.__init__ = _with_extra_options

from lamina.cli.main import main  # noqa: E402  (after the backend is patched)

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))

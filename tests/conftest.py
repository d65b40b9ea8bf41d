"""Shared test setup: GPU tests skip without a GPU, compiled kernels go to a private cache, and
the garbage collector runs less often."""

import gc

import pytest
import torch

pytest_plugins = ["lamina.testing.conformance"]

YOUNG_OBJECTS_PER_COLLECTION = 10_000
"""Exports, compiles and simulations allocate objects by the million and most die young; at
Python's default of 700, the collector's passes over the survivors take a tenth of the run."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped where PyTorch sees none")
    gc.set_threshold(YOUNG_OBJECTS_PER_COLLECTION)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU is visible to PyTorch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def private_kernel_cache(tmp_path_factory):
    """Kernels compiled into a folder of the session's (also where no ``cache_dir`` is
    configured), and no program cache unless a test asks for one: tests patch lamina's
    internals, which a program compiled before the patch would not see."""
    patch = pytest.MonkeyPatch()
    patch.setenv("LAMINA_CACHE_DIR", str(tmp_path_factory.mktemp("kernel-cache")))
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("user-cache")))
    patch.setenv("LAMINA_PROGRAM_CACHE", "0")
    yield
    patch.undo()

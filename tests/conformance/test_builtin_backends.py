"""lamina's own backends, checked by the conformance kit like any backend plugin."""

from lamina.backends.cuda import plugin as cuda
from lamina.backends.reference import plugin as reference
from lamina.testing import BackendPluginSuite, Capabilities


class TestReferenceBackend(BackendPluginSuite):
    plugin = reference


class TestCudaBackend(BackendPluginSuite):
    plugin = cuda
    capabilities = Capabilities(needs_gpu=True)

"""Each test of the torch.compile integration starts and ends with Dynamo's caches empty, so that
no test reuses a graph another compiled."""

import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()

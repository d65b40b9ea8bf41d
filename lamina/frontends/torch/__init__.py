"""The PyTorch frontend: ``torch.export`` capture -> Torch IR."""

from lamina.frontends.torch.capture import DEFAULT_KEEP, Captured, capture

__all__ = ["DEFAULT_KEEP", "Captured", "capture"]

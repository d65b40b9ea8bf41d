"""How lamina plugs into other tools: ``torch.compile(model, backend="lamina")``."""

from lamina.integrations.torch_compile import lamina_backend

__all__ = ["lamina_backend"]

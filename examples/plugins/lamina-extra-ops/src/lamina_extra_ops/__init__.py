"""lamina-extra-ops: decompositions of log-domain and smooth activation ops for lamina."""

from lamina_extra_ops.decompositions import DECOMPOSITIONS
from lamina_extra_ops.plugin import KEEP

__all__ = ["DECOMPOSITIONS", "KEEP"]

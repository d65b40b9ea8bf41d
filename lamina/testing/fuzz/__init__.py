"""The program fuzzer: random programs compiled by lamina and checked against eager PyTorch.

``python -m lamina.testing.fuzz --seeds N`` runs N of them; a failure prints its seed and
the program's source.
"""

from lamina.testing.fuzz.generator import generate
from lamina.testing.fuzz.program import Program
from lamina.testing.fuzz.runner import OUTCOMES, Outcome, judge, run
from lamina.testing.fuzz.writer import DTYPES, SIZES

__all__ = ["DTYPES", "OUTCOMES", "Outcome", "Program", "SIZES", "generate", "judge", "run"]

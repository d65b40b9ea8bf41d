"""The default selection policy: the schedule expected to run fastest.

Schedules may offer ``estimate_cost(kernel, target) -> float`` (lower is better);
the policy takes the cheapest, and among schedules that offer no estimate keeps
the priority order the registry gives.
"""

from __future__ import annotations

import math

from lamina.core.errors import SymbolicSizeError


class CostModelPolicy:
    name = "cost_model"

    def choose(self, kernel, candidates, target):
        def cost(schedule):
            estimate = getattr(schedule, "estimate_cost", None)
            try:
                return estimate(kernel, target) if estimate is not None else math.inf
            except SymbolicSizeError:  # an estimate that needs a number a symbolic size does not give
                return math.inf

        ranked = sorted(enumerate(candidates), key=lambda pair: (cost(pair[1]), pair[0]))
        return ranked[0][1]

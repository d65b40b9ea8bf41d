"""The default selection policy: the schedule expected to run fastest.

Schedules may offer ``estimate_cost(kernel, target) -> float`` (lower is better);
the policy takes the cheapest, and among schedules that offer no estimate keeps
the priority order the registry gives.
"""

from __future__ import annotations

import math


class CostModelPolicy:
    name = "cost_model"

    def choose(self, kernel, candidates, target):
        def cost(schedule):
            estimate = getattr(schedule, "estimate_cost", None)
            return estimate(kernel, target) if estimate is not None else math.inf

        ranked = sorted(enumerate(candidates), key=lambda pair: (cost(pair[1]), pair[0]))
        return ranked[0][1]

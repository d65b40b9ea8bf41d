"""The default selection policy: the schedule expected to run fastest.

Schedules may offer ``estimate_cost(kernel, target) -> float`` (lower is better);
the policy takes the cheapest, and among schedules that offer no estimate keeps
the priority order the registry gives.
"""

from __future__ import annotations

from lamina.core.selection import cheapest


class CostModelPolicy:
    name = "cost_model"

    def choose(self, kernel, candidates, target):
        return cheapest(kernel, candidates, target)

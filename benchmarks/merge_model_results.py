"""Merge the records of several ``lamina bench --models`` processes into one, as if one run had made them.

    python benchmarks/merge_model_results.py --out MERGED.json PART.json [PART.json ...]

Cases are put in the suite's order and the geomean speedups are taken again over all of them;
``commands`` lists each process's own command.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from lamina.bench.model_suite import model_cases


def merge(parts: list[dict]) -> dict:
    order = {case.name: k for k, case in enumerate(model_cases())}
    cases = sorted((case for part in parts for case in part["cases"]), key=lambda c: order[c["name"]])
    geomeans: dict = {}
    for figure in ("graph_us", "calls_us"):
        for contender in ("eager", "torch.compile"):
            ratios = [s for c in cases if (s := c["speedup"].get(figure, {}).get(contender)) is not None]
            if ratios:
                mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                geomeans.setdefault(figure, {})[contender] = {"speedup": mean, "cases": len(ratios)}
    merged = {key: value for key, value in parts[0].items() if key not in ("command", "cases", "geomean_speedup")}
    merged["commands"] = [part["command"] for part in parts]
    merged["geomean_speedup"] = geomeans
    merged["cases"] = cases
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("parts", nargs="+")
    args = parser.parse_args()
    document = merge([json.loads(Path(p).read_text()) for p in args.parts])
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()

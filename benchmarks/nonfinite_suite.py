"""The kernel suite with NaN and infinities planted: does lamina give eager's non-finite pattern?

    python benchmarks/nonfinite_suite.py --out benchmarks/results/DATE_h200_nonfinite.json
    python benchmarks/nonfinite_suite.py --dtype bfloat16 --filter 'qwen.*.s128.*'
    python benchmarks/nonfinite_suite.py --device cpu          # small cases, on the simulator

Each case of ``lamina bench``'s kernel suite (``lamina.bench.suite.builtin_suite``) gets its
usual random inputs (``lamina bench``'s, seed 0), then a few NaN, +inf and -inf (``--count``
of each) at random positions of every floating-point input. lamina and eager run on those
same inputs on the same device, and the case's record says whether lamina's output has NaN
exactly where eager's has, +inf and -inf exactly where eager's has them (positions and
signs), how many of each there are, and the relative error (``lamina.bench.measure``'s
norm-wise one) over the positions where both are finite. A case whose pattern differs, or
that fails to compile or run, is a mismatch; the exit status is 1 if any case is one.

On the CPU the simulator runs the kernels, which is slow for the suite's large cases: there
only cases whose inputs hold at most ``--max-elements`` elements run (the others are listed as
skipped), so that the script can be tried without a GPU. On the GPU every case runs.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import platform
import sys
import time

import torch

import lamina
from lamina.bench.measure import relative_error
from lamina.bench.suite import DTYPES, Case, builtin_suite

KINDS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}
CPU_MAX_ELEMENTS = 200_000


def matches(name: str, pattern: str) -> bool:
    """A glob (with * ? or [) matches the whole name; any other pattern is a substring (as ``lamina bench``)."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


def planted_inputs(case: Case, device: str, seed: int, count: int) -> tuple[tuple[torch.Tensor, ...], list[dict]]:
    """The case's inputs with ``count`` of each NaN, +inf and -inf at random positions of every
    floating-point input, and where they went (input, flat position, kind)."""
    inputs = case.program().example_inputs(seed=seed, device=device)
    generator = torch.Generator().manual_seed(seed + 1)
    planted = []
    for spec, tensor in zip(case.inputs, inputs):
        if not tensor.is_floating_point():
            continue
        flat = tensor.view(-1)
        places = torch.randperm(flat.numel(), generator=generator)[: count * len(KINDS)].tolist()
        for n, position in enumerate(places):
            kind = list(KINDS)[n % len(KINDS)]
            flat[position] = KINDS[kind]
            planted.append({"input": spec.name, "position": position, "kind": kind})
    return inputs, planted


def _masks(t: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"nan": torch.isnan(t), "+inf": torch.isposinf(t), "-inf": torch.isneginf(t)}


def compare(got: torch.Tensor, want: torch.Tensor) -> dict:
    """Whether ``got`` has ``want``'s NaN, +inf and -inf at the same positions, each kind's
    count in both, the positions that differ (the first few), and the relative error over the
    positions where both are finite."""
    got, want = got.detach().cpu(), want.detach().cpu()
    if got.shape != want.shape:
        return {"same_pattern": False, "message": f"shape {tuple(got.shape)} where eager's is {tuple(want.shape)}"}
    if not want.is_floating_point():
        same = bool(torch.equal(got, want))
        return {"same_pattern": same, "counts": {}, "differing": [], "relative_error": 0.0 if same else None}
    got_masks, want_masks = _masks(got), _masks(want)
    differ = torch.zeros(got.shape, dtype=torch.bool)
    counts = {}
    for kind in KINDS:
        differ |= got_masks[kind] != want_masks[kind]
        counts[kind] = {"lamina": int(got_masks[kind].sum()), "eager": int(want_masks[kind].sum())}
    finite = torch.isfinite(got) & torch.isfinite(want)
    error = relative_error(got[finite], want[finite]) if bool(finite.any()) else 0.0
    return {"same_pattern": not bool(differ.any()), "counts": counts,
            "differing": differ.nonzero().tolist()[:8], "finite_elements": int(finite.sum()),
            "relative_error": error}


def _outputs(result) -> list[torch.Tensor]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def run_case(case: Case, device: str, seed: int, count: int) -> dict:
    fn = case.program().function()
    inputs, planted = planted_inputs(case, device, seed, count)
    record = {"case": case.name, "dtype": str(case.dtype).removeprefix("torch."), "planted": planted}
    try:
        with torch.no_grad():
            want = _outputs(fn(*inputs))
            got = _outputs(lamina.compile(fn, inputs)(*inputs))
    except Exception as e:  # noqa: BLE001 - a case that fails is reported, and the rest still run
        return record | {"status": "failed", "message": f"{type(e).__name__}: {e}".splitlines()[0]}
    if len(got) != len(want):
        return record | {"status": "mismatch", "message": f"{len(got)} outputs where eager gives {len(want)}"}
    outputs = [compare(g, w) for g, w in zip(got, want)]
    same = all(o["same_pattern"] for o in outputs)
    return record | {"status": "ok" if same else "mismatch", "outputs": outputs}


def _elements(case: Case) -> int:
    total = 0
    for spec in case.inputs:
        n = 1
        for size in spec.shape:
            n *= size
        total += n
    return total


def _line(record: dict) -> str:
    if record["status"] in ("failed", "skipped") or "outputs" not in record:
        return f"{record['status']}: {record.get('message', '')}"
    parts = []
    for o in record["outputs"]:
        counts = " ".join(f"{k} {v['lamina']}/{v['eager']}" for k, v in o.get("counts", {}).items())
        error = o.get("relative_error")
        error_text = f"relative error {error:.2e} over the finite" if error is not None else "indices differ"
        pattern = "same pattern" if o["same_pattern"] else f"DIFFERENT pattern at {o.get('differing')}"
        parts.append(f"{pattern} ({counts}, lamina/eager), {error_text}")
    return f"{record['status']}: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu",
                        help="where lamina and eager run (default: cuda if PyTorch sees a GPU)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="only the cases of this dtype")
    parser.add_argument("--filter", action="append", metavar="PATTERN",
                        help="only cases whose name matches (a glob, or a substring); repeatable")
    parser.add_argument("--count", type=int, default=2, help="how many of each NaN, +inf, -inf per input (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="the inputs' seed (default 0, as lamina bench)")
    parser.add_argument("--max-elements", type=int, default=None,
                        help=f"skip cases whose inputs hold more elements (default: {CPU_MAX_ELEMENTS} on the "
                             "CPU, none on the GPU)")
    parser.add_argument("--out", metavar="FILE", help="write the records as JSON")
    args = parser.parse_args(argv)

    cases = builtin_suite()
    if args.dtype:
        cases = [c for c in cases if c.dtype == DTYPES[args.dtype]]
    if args.filter:
        cases = [c for c in cases if any(matches(c.name, p) for p in args.filter)]
    if not cases:
        parser.error("no suite case matches --filter/--dtype; lamina bench --list shows the cases")
    limit = args.max_elements if args.max_elements is not None else (
        CPU_MAX_ELEMENTS if args.device == "cpu" else None)

    records, started = [], time.perf_counter()
    for n, case in enumerate(cases, 1):
        if limit is not None and _elements(case) > limit:
            record = {"case": case.name, "status": "skipped",
                      "message": f"{_elements(case)} input elements, over --max-elements {limit}"}
        else:
            record = run_case(case, args.device, args.seed, args.count)
        records.append(record)
        print(f"[{n}/{len(cases)}] {case.name}: {_line(record)}", flush=True)

    mismatches = [r["case"] for r in records if r["status"] in ("mismatch", "failed")]
    ran = sum(r["status"] != "skipped" for r in records)
    print(f"{ran} cases ran, {len(records) - ran} skipped, {len(mismatches)} with a different pattern or failed"
          f"{': ' + ', '.join(mismatches) if mismatches else ''} ({time.perf_counter() - started:.0f} s)")
    if args.out:
        device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
        summary = {"command": " ".join(["python", "benchmarks/nonfinite_suite.py", *(argv or sys.argv[1:])]),
                   "device": args.device, "device_name": device_name, "torch": torch.__version__,
                   "lamina": getattr(lamina, "__version__", None), "count": args.count, "seed": args.seed,
                   "mismatches": mismatches, "cases": records}
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

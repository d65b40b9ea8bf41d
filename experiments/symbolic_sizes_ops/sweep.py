"""Every op of lamina's case database through ``torch.compile(..., backend="lamina", dynamic=True)``
on the CPU (the Kernel IR simulator): is each compiled for sizes known only at run time, or for
concrete sizes (with the warning that says why), and is the result eager's?

``python experiments/symbolic_sizes_ops/sweep.py [--ops aten.add.Tensor,...]`` prints one line per
case and a summary; a whole sweep writes ``sweep.json`` beside itself."""
import argparse
import collections
import json
import pathlib
import sys
import warnings

import torch

from lamina.api import Compiler
from lamina.core.errors import LaminaError
from lamina.core.ir import loop_ir
from lamina.testing.cases.database import aten_op, cases_for, registered_ops
from lamina.testing.cases.samples import T

ROOT = pathlib.Path(__file__).resolve().parents[2]


def materialised(value, dtype):
    if isinstance(value, T):
        return value.make(dtype)[1]
    if isinstance(value, (list, tuple)):
        return [materialised(v, dtype) for v in value]
    return value


def leaves(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v)


def close(got, want) -> bool:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            return False
        if want.dtype.is_floating_point:
            return torch.allclose(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
        return torch.equal(got, want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(close(g, w) for g, w in zip(got, want))
    return got == want


def one(op, case, dtype, programs):
    torch._dynamo.reset()
    args = [materialised(a, dtype) for a in case.args]
    kwargs = {k: materialised(v, dtype) for k, v in case.kwargs.items()}
    computation = cases_for(op).computation()
    with torch.no_grad():
        want = computation(*args, **kwargs)
        compiled = torch.compile(lambda *a, **k: computation(*a, **k), backend="lamina", dynamic=True)
        before = len(programs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(*args, **kwargs)
    new = programs[before:]
    symbolic = any(text.find("s0") >= 0 for text, _ in new)
    said = [str(w.message) for w in caught if "for each new size" in str(w.message)]
    if not close(got, want):
        return "wrong", ""
    if symbolic:  # the schedules that ran the kernels of symbolic sizes
        return "symbolic", ", ".join(sorted({name for _, schedules in new for name in schedules}))
    if said:
        return "concrete", said[0].split(": ", 1)[-1][:160]
    return "no symbols", ""  # Dynamo kept every size (sizes of 1, or no tensor arguments)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops")
    args = parser.parse_args()
    programs = []
    original = Compiler.compile_captured

    def counted(self, captured, example_inputs, started=None):
        specialization = original(self, captured, example_inputs, started)
        symbolic = [t.schedule for t in specialization.compilation.tiles if loop_ir.has_symbolic_sizes(t.kernel)]
        programs.append((" ".join(str(i.type) for i in captured.graph.inputs), symbolic))
        return specialization

    Compiler.compile_captured = counted
    ops = args.ops.split(",") if args.ops else registered_ops()
    results = []
    for op in ops:
        entry = cases_for(op)
        dtype = "f32" if "f32" in entry.dtypes else entry.dtypes[0]
        for case in entry.cases:
            try:
                outcome, why = one(op, case, dtype, programs)
            except LaminaError as e:
                outcome, why = "lamina error", str(e).splitlines()[0][:160]
            except Exception as e:  # noqa: BLE001 - what the sweep is for
                inner = getattr(e, "inner_exception", e)
                kind = "lamina error" if isinstance(inner, LaminaError) else "crash"
                outcome, why = kind, f"{type(inner).__name__}: {str(inner).splitlines()[0][:160] if str(inner) else ''}"
            why = why.replace(f"{ROOT}/", "")  # source lines named from the repository
            results.append({"op": op, "case": case.name, "dtype": dtype, "outcome": outcome, "why": why})
            print(f"{outcome:12s} {op} {case.name} {why}", flush=True)
    summary = collections.Counter(r["outcome"] for r in results)
    print(dict(summary))
    schedules = collections.Counter(name for r in results if r["outcome"] == "symbolic"
                                    for name in r["why"].split(", ") if name)
    print("cases whose symbolic kernels each schedule ran:", dict(schedules))
    if not args.ops:  # a whole sweep is kept; a chosen few only printed
        out = pathlib.Path(__file__).with_name("sweep.json")
        out.write_text(json.dumps({"summary": summary, "cases": results}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())

"""``lamina compile``: print one level of a compiled program, or all six."""

from __future__ import annotations

import lamina
from lamina.core.pipeline import LEVELS
from lamina.program_spec import program_spec


def compile_command(args) -> int:
    spec = program_spec(args.code, args.input)
    compiled = lamina.compile(spec.function(), spec.example_inputs(), schedule=args.schedule, target=args.target)
    if args.ir != "all":
        print(compiled.ir(args.ir))
    else:
        for level in LEVELS:
            print(f"=== {level} ===")
            print(compiled.ir(level))
            print()
    if args.timings:
        print("=== timings ===" if args.ir == "all" else "")
        print(compiled.compilation.timings.format())
    return 0

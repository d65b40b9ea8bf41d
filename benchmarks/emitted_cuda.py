"""A hash of the CUDA that every case of the kernel suite emits for the H200, one line a case.

    python benchmarks/emitted_cuda.py > before.txt   # on one commit
    python benchmarks/emitted_cuda.py > after.txt    # on another
    diff before.txt after.txt                        # no output: the same kernels, byte for byte

A change that means to leave the generated code alone (a refactor, a rename) proves it this
way; no GPU is needed, since the CUDA is printed before NVRTC sees it. ``--show NAME`` prints a
case's CUDA instead, to see what differs.
"""

from __future__ import annotations

import argparse
import hashlib

import lamina
from lamina.bench.suite import builtin_suite


def emitted_cuda(case) -> str:
    program = case.program()
    return lamina.compile(program.function(), program.example_inputs(), target="sm_90").ir("cuda")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", metavar="NAME", help="print this case's CUDA instead of the hashes")
    args = parser.parse_args()
    for case in builtin_suite():
        if args.show:
            if case.name == args.show:
                print(emitted_cuda(case))
            continue
        print(f"{hashlib.sha256(emitted_cuda(case).encode()).hexdigest()[:16]}  {case.name}", flush=True)


if __name__ == "__main__":
    main()

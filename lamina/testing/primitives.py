"""What a decomposition may leave in Tensor IR: the three primitives, with known scalar ops only."""

from __future__ import annotations

from lamina.core.errors import VerificationError
from lamina.core.ir import expr as ex, tensor_ir
from lamina.core.ir.tensor_ir import Arg, Coord, Elementwise, Gathered, IndexMap, Reduction

_FUNCTION_LEAVES = (Arg, Coord, ex.Const)
_INDEX_LEAVES = (ex.Var, ex.Const, Gathered)


def check_primitives(program: tensor_ir.Program) -> None:
    """Raise VerificationError naming every op that is not a primitive or uses an unknown scalar op."""
    problems = []
    for o in program.ops:
        if not isinstance(o, (Elementwise, Reduction, IndexMap)):
            problems.append(f"{getattr(o, 'name', o)!s} is a {type(o).__name__}, not Elementwise, Reduction or IndexMap")
            continue
        if isinstance(o, Elementwise):
            problems += [f"{o.name}: {p}" for p in _expression_problems(o.fn, _FUNCTION_LEAVES)]
        elif isinstance(o, IndexMap):
            for e in o.index:
                problems += [f"{o.name}: {p}" for p in _expression_problems(e, _INDEX_LEAVES)]
        elif o.op not in tensor_ir.REDUCTIONS:
            problems.append(f"{o.name}: reduction {o.op!r} is not one of {', '.join(tensor_ir.REDUCTIONS)}")
    if problems:
        raise VerificationError("the decomposition leaves more than the three primitives:\n  " + "\n  ".join(problems))


def _expression_problems(e: ex.Expr, leaves: tuple[type, ...]) -> list[str]:
    problems = []
    for node in ex.walk(e):
        if isinstance(node, ex.Op):
            if node.op not in ex.OPS:
                problems.append(f"scalar op {node.op!r} is not one of lamina's ({', '.join(ex.OPS)})")
        elif not isinstance(node, leaves):
            problems.append(f"{type(node).__name__} {node!r} may not appear here")
    return problems

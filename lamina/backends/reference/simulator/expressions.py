"""Kernel IR expressions turned into Python closures that evaluate them for every thread at once.

A closure takes the mask of running threads and returns a tensor: 0-d when the value is
the same for every thread, else one element per thread of the grid. Loads happen only
for running threads; the operands of ``where``, ``and`` and ``or`` that load are
evaluated only where C would evaluate them (the ternary and ``&&``/``||`` short-circuit).

A float32 ``a * b + c`` (or ``c + a * b``, ``a * b - c``, ``c - a * b``) is one fused
multiply-add on the GPU, as NVRTC contracts it by default (``--fmad=true``): the product is
not rounded, so ``3e38 * -2.06 + 3e38 * 1.17`` accumulated that way is -inf where two
rounded products give -inf + inf = NaN. The simulator computes it the same way: the product
exactly in float64, the sum rounded once to float32 (rounded twice, through float64, which
differs from the GPU only in the rare ties of the last bit). Where both operands of the add
are products, the left one is fused, as LLVM's contraction picks it.
"""

from __future__ import annotations

import itertools
from typing import Callable, Mapping

import torch

from lamina.backends.reference import tf32
from lamina.backends.reference.scalar_ops import apply_op, as_tensor, torch_dtype
from lamina.backends.reference.simulator.grid import Mask, ThreadGrid
from lamina.core.errors import SimulationError, VerificationError
from lamina.core.ir import dtypes, expr as ex, kernel_ir
from lamina.core.ir.dtypes import DType

Evaluator = Callable[[Mask], torch.Tensor]

_INTEGER_DIVISIONS = ("floordiv", "mod", "truncdiv", "fmod")
"""Operators that C leaves undefined for an integer divisor of zero."""


class ExpressionCompiler:
    def __init__(self, kernel: str, grid: ThreadGrid, env: dict[str, torch.Tensor], memories: Mapping,
                 sites: itertools.count):
        self.kernel = kernel
        self.grid = grid
        self.env = env
        self.memories = memories
        self.sites = sites
        self._compiled: dict[tuple[int, int], tuple[ex.Expr, Mapping, Evaluator]] = {}

    def compile(self, e: ex.Expr, scope: Mapping[str, DType]) -> Evaluator:
        """``e``'s evaluator. An expression that appears several times in one tree (the same
        object: index arithmetic nests its parts) is compiled once: walked as a tree, a deep
        nest of shared parts takes exponential time."""
        key = (id(e), id(scope))
        known = self._compiled.get(key)
        if known is not None and known[0] is e and known[1] is scope:
            return known[2]
        evaluator = self._compile(e, scope)
        self._compiled[key] = (e, scope, evaluator)
        return evaluator

    def _compile(self, e: ex.Expr, scope: Mapping[str, DType]) -> Evaluator:
        if isinstance(e, ex.Const):
            value = as_tensor(e.value, e.dtype)
            return lambda mask: value
        if isinstance(e, ex.Var):
            return self._var(e, scope)
        if isinstance(e, kernel_ir.Special):
            return self._special(e)
        if isinstance(e, kernel_ir.Load):
            return self._load(e, scope)
        if isinstance(e, ex.Op):
            return self._op(e, scope)
        if isinstance(e, kernel_ir.ShuffleXor):
            return self._shuffle_xor(e, scope)
        if isinstance(e, kernel_ir.ClusterLoad):
            return self._cluster_load(e, scope)
        if isinstance(e, kernel_ir.Tf32):
            value_of = self.compile(e.value, scope)
            return lambda mask: tf32.rounded(torch.as_tensor(value_of(mask), dtype=torch.float32))
        if isinstance(e, kernel_ir.PackedPair):
            return self._packed_pair(e, scope)
        raise VerificationError(f"kernel {self.kernel}: the simulator cannot evaluate {e!r}; "
                                f"Kernel IR expressions are constants, variables, specials, loads, ops and shuffles")

    def _packed_pair(self, e: kernel_ir.PackedPair, scope) -> Evaluator:
        low_of, high_of, dtype = self.compile(e.low, scope), self.compile(e.high, scope), torch_dtype(e.pair_dtype)

        def pack(mask: Mask) -> torch.Tensor:
            low, high = (torch.as_tensor(f(mask), dtype=torch.float32).to(dtype) for f in (low_of, high_of))
            low, high = torch.broadcast_tensors(low, high)
            return torch.stack([low, high], -1).contiguous().view(torch.int32).squeeze(-1)

        return pack

    def _var(self, e: ex.Var, scope) -> Evaluator:
        if e.name not in scope:
            raise VerificationError(f"kernel {self.kernel}: variable {e.name} is used before it is declared")
        env, name = self.env, e.name
        return lambda mask: env[name]

    def _special(self, e: kernel_ir.Special) -> Evaluator:
        if e.kind not in kernel_ir.SPECIALS or e.axis not in ("x", "y", "z"):
            raise VerificationError(f"kernel {self.kernel}: unknown special {e.kind}.{e.axis}")
        value = self.grid.special(e.kind, e.axis)
        return lambda mask: value

    def _load(self, e: kernel_ir.Load, scope) -> Evaluator:
        memory = self.memory(e.array, len(e.index), "load from")
        indices = [self.compile(i, scope) for i in e.index]
        site = next(self.sites)
        return lambda mask: memory.read([f(mask) for f in indices], mask, site)

    def _cluster_load(self, e: kernel_ir.ClusterLoad, scope) -> Evaluator:
        memory = self.memory(e.array, len(e.index), "cluster load from")
        if not hasattr(memory, "read_from_cluster"):
            raise VerificationError(f"kernel {self.kernel}: cluster load from {e.array}, which is not a shared array")
        memory.cluster_checks = True
        indices = [self.compile(i, scope) for i in e.index]
        rank_of = self.compile(e.rank, scope)
        site = next(self.sites)
        return lambda mask: memory.read_from_cluster([f(mask) for f in indices], rank_of(mask), mask, site)

    def _shuffle_xor(self, e: kernel_ir.ShuffleXor, scope) -> Evaluator:
        """Every lane evaluates the value in lockstep, then reads that of lane ``lane ^ mask``."""
        value_of = self.compile(e.value, scope)
        grid, kernel, text = self.grid, self.kernel, kernel_ir.format_expr(e)
        partner_local = grid.local_id ^ e.lane_mask
        if bool((partner_local >= grid.threads_per_block).any()):
            raise SimulationError(f"kernel {kernel}: {text} reads a lane past the end of the block; "
                                  f"shuffle within whole warps")
        partner = grid.block_id * grid.threads_per_block + partner_local

        def run(mask: Mask) -> torch.Tensor:
            value = value_of(mask)
            if value.dim() == 0:
                return value
            if not mask.full:
                idle = mask.active & ~mask.active.index_select(0, partner)
                if bool(idle.any()):
                    thread = int(torch.argmax(idle.to(torch.uint8)))
                    raise SimulationError(f"kernel {kernel}: {text} by {grid.describe_thread(thread)} reads a "
                                          f"lane that does not run it; every lane of a warp must shuffle together")
            return value.index_select(0, partner)

        return run

    def memory(self, name: str, rank: int, verb: str):
        """The array ``name``, checked to take ``rank`` indices."""
        memory = self.memories.get(name)
        if memory is None:
            raise VerificationError(f"kernel {self.kernel}: {verb} unknown array {name}")
        expected = len(memory.shape)
        if rank != expected:
            raise VerificationError(
                f"kernel {self.kernel}: {verb} {name} with {rank} indices; it has rank {expected}")
        return memory

    def _op(self, e: ex.Op, scope) -> Evaluator:
        name, dtype = e.op, e.dtype
        args = [self.compile(a, scope) for a in e.args]
        if name == "where" and (_loads(e.args[1]) or _loads(e.args[2])):
            return _lazy_where(args, dtype)
        if name in ("and", "or") and _loads(e.args[1]):
            return _short_circuit(name, args)
        if name in _INTEGER_DIVISIONS and not dtype.is_float and not isinstance(e.args[1], ex.Const):
            return self._integer_division(e, args)
        contracted = _contracted(e)
        if contracted is not None:
            return self._multiply_add(*contracted, scope)
        if len(args) == 1:
            (a,) = args
            return lambda mask: apply_op(name, [a(mask)], dtype)
        if len(args) == 2:
            a, b = args
            return lambda mask: apply_op(name, [a(mask), b(mask)], dtype)
        return lambda mask: apply_op(name, [f(mask) for f in args], dtype)

    def _multiply_add(self, product: ex.Op, addend: ex.Expr, product_sign: float, addend_sign: float,
                      scope) -> Evaluator:
        """``product_sign * a * b + addend_sign * addend`` rounded once to float32, as the GPU's FFMA."""
        a_of, b_of = (self.compile(x, scope) for x in product.args)
        addend_of = self.compile(addend, scope)

        def wide(value) -> torch.Tensor:
            return as_tensor(value, dtypes.float32).double()

        def run(mask: Mask) -> torch.Tensor:
            exact = wide(a_of(mask)) * wide(b_of(mask)) * product_sign
            return (exact + wide(addend_of(mask)) * addend_sign).float()

        return run

    def _integer_division(self, e: ex.Op, args: list[Evaluator]) -> Evaluator:
        """C leaves integer division by zero undefined; idle threads may hold zeros, so only
        running threads that divide by zero are an error."""
        name, dtype = e.op, e.dtype
        a, b = args
        text = kernel_ir.format_expr(e)

        def run(mask: Mask) -> torch.Tensor:
            divisor = b(mask)
            zero = divisor == 0
            if bool(zero.any()):
                hit = zero & mask.active if zero.dim() else mask.active
                if bool(hit.any()):
                    thread = int(torch.argmax(hit.to(torch.uint8)))
                    raise SimulationError(f"kernel {self.kernel}: integer division by zero in {text} "
                                          f"by {self.grid.describe_thread(thread)}")
                divisor = torch.where(zero, torch.ones((), dtype=divisor.dtype), divisor)
            return apply_op(name, [a(mask), divisor], dtype)

        return run


def _is_product(e: ex.Expr) -> bool:
    return isinstance(e, ex.Op) and e.op == "mul" and e.dtype == dtypes.float32


def _contracted(e: ex.Op) -> tuple[ex.Op, ex.Expr, float, float] | None:
    """``(product, addend, product_sign, addend_sign)`` where ``e`` is a float32 add or subtract
    that the GPU computes as one fused multiply-add, else None."""
    if e.op not in ("add", "sub") or e.dtype != dtypes.float32:
        return None
    left, right = e.args
    if _is_product(left):
        return left, right, 1.0, (1.0 if e.op == "add" else -1.0)
    if _is_product(right):
        return right, left, (1.0 if e.op == "add" else -1.0), 1.0
    return None


def _lazy_where(args: list[Evaluator], dtype: DType) -> Evaluator:
    cond, if_true, if_false = args

    def run(mask: Mask) -> torch.Tensor:
        c = as_tensor(cond(mask), dtypes.bool_)
        if c.dim() == 0:
            return as_tensor(if_true(mask) if bool(c) else if_false(mask), dtype)
        return apply_op("where", [c, if_true(mask.narrow(c)), if_false(mask.narrow(~c))], dtype)

    return run


def _short_circuit(name: str, args: list[Evaluator]) -> Evaluator:
    lhs, rhs = args
    decides = name == "or"

    def run(mask: Mask) -> torch.Tensor:
        left = as_tensor(lhs(mask), dtypes.bool_)
        if left.dim() == 0:
            return left if bool(left) == decides else as_tensor(rhs(mask), dtypes.bool_)
        right = as_tensor(rhs(mask.narrow(left != decides)), dtypes.bool_)
        return apply_op(name, [left, right], dtypes.bool_)

    return run


def _loads(e: ex.Expr) -> bool:
    return any(isinstance(node, (kernel_ir.Load, kernel_ir.ClusterLoad)) for node in ex.walk(e))

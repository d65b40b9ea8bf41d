"""A plugin with three deliberate faults, for checking that the conformance kit reports each precisely.

- ``aten.expm1.default`` computes ``exp(x)``: it forgets the ``- 1`` (wrong numerics);
- ``aten.sign.default`` leaves a ``Sign`` op in Tensor IR, which is none of the three
  primitives (what a plugin gets when it invents its own op instead of writing the
  formula);
- the ``unguarded`` schedule runs one thread per point but drops the bounds check, so
  that the last block reads and writes past the end wherever the point count is not a
  multiple of the block size.

Never installed: the tests register it directly.
"""

from __future__ import annotations

import attrs

from lamina.core.hookspecs import hookimpl
from lamina.core.ir import kernel_ir, loop_ir, tensor_ir
from lamina.core.ir.torch_ir import SourceLocation, TensorType
from lamina.plugins.schedules.generic import GenericSchedule
from lamina.plugins.schedules.loop_to_kernel import split_parallel_nest


def decompose_expm1_wrongly(builder, node):
    return builder.unary("exp", builder.value(node.args[0]))


@attrs.frozen
class Sign:
    """Not a Tensor IR primitive: lamina's later stages know nothing of it."""

    name: str
    input: str
    type: TensorType
    source: SourceLocation | None = None


def decompose_sign_as_its_own_op(builder, node):
    x = builder.value(node.args[0])
    sign = Sign(f"{node.name}_own_op", x, builder.type(x), builder.source)
    builder.ops.append(sign)
    return builder.elementwise(tensor_ir.Arg(0, sign.type.dtype), [sign.name], sign.type.shape, role="copy")


class UnguardedSchedule(GenericSchedule):
    """The generic schedule without its ``if linear < total`` guard."""

    name = "unguarded"
    priority = -100

    def applies(self, kernel, target):
        loops, inner = split_parallel_nest(kernel.body)
        return bool(loops) and all(isinstance(s, loop_ir.Store) for s in inner)

    def lower(self, tile, target):
        kernel = super().lower(tile, target)
        body = []
        for statement in kernel.body:
            body += statement.then if isinstance(statement, kernel_ir.If) else [statement]
        return attrs.evolve(kernel, body=tuple(body))


@hookimpl
def lamina_register_ops(register):
    register("aten.expm1.default", decompose_expm1_wrongly)
    register("aten.sign.default", decompose_sign_as_its_own_op)


@hookimpl
def lamina_register_schedules(register):
    register(UnguardedSchedule())

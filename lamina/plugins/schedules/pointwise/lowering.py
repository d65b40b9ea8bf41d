"""The pointwise schedule's Tile IR as Kernel IR.

With W elements per vector, P vectors per thread and S steps, each thread runs::

    var first_vector = blockIdx.x * (T * P * S) + threadIdx.x
    for step in 0..S:                          (left out when S is 1)
      unrolled for slot in 0..P:               (loads first: P vectors in flight at once)
        var vector = first_vector + (step * P + slot) * T
        if vector < vectors:                   (left out when the grid covers them exactly)
          var condition = i3 < 64              (a where's condition, the same in every lane)
          vector load a_vector[slot][0] <- a[vector * W]
          if condition:                        (a load in one branch of that where)
            vector load b_vector[slot][0] <- b[...]
      unrolled for slot in 0..P:
        var vector = first_vector + (step * P + slot) * T
        if vector < vectors:
          var i0 = vector // (n1 / W)          (only the coordinates the arithmetic reads)
          var condition = i3 < 64
          if condition:                        (the where resolved on each side)
            out_vector[slot][j] = value of element j     (j = 0 .. W - 1)
          else:
            out_vector[slot][j] = value of element j
          vector store out[vector * W] <- out_vector[slot][0]

A vector access's offset comes straight from ``vector``: a buffer walked row-major like
the loop nest is at ``vector * W``, one broadcast along the outer loops at ``vector %
(n1 / W) * W``. A buffer with elements narrower than the vector's 16 bytes is read in
one access, a wider one in several of 16 bytes. Scalar loads stay in the expressions,
one per element, where only the elements that need them evaluate them. With one vector
per thread both halves share one guard, and each ``if`` of the loads joins the ``if``
of the arithmetic on the same condition.

A condition the same in every lane is evaluated once per vector, at its first element.
A guarded vector load leaves its registers unset where its branch is not taken, and
only the side of the arithmetic where it is taken reads them. A store that keeps its element
where a condition does not hold (``analysis.kept_where_not``, a cache's new row) computes its
value everywhere and stores it under ``if condition``.
"""

from __future__ import annotations


from lamina.core.ir import dtypes, expr as ex, index, kernel_ir, loop_ir, sizes, tile_ir
from lamina.core.ir.expr import Expr
from lamina.core.ir.names import fresh_name
from lamina.plugins.schedules import loop_to_kernel
from lamina.plugins.schedules.pointwise.analysis import (
    VECTOR_BYTES,
    AccessPlan,
    Guard,
    PointwiseNest,
    plan_accesses,
)
from lamina.plugins.schedules.pointwise.tiling import Decisions, decisions, nest_of


MAX_ARITHMETIC_COPIES = 8
"""The most copies of a store's arithmetic that branching on the conditions evaluated
once per vector may make (a ``cat`` of 8 parts, or 3 independent conditions); past it
the arithmetic selects element by element, by the conditions' names. A branch rather
than a select computes only the side each vector takes, and reads only the registers
that side's guarded loads filled."""


def lower(tile: tile_ir.TileKernel) -> kernel_ir.Kernel:
    return _Lowering(tile).kernel()


class _Lowering:
    def __init__(self, tile: tile_ir.TileKernel):
        self.loop_kernel = tile.kernel
        self.nest: PointwiseNest = nest_of(tile.kernel)
        self.d: Decisions = decisions(tile)
        self.plan: AccessPlan = plan_accesses(tile.kernel, self.nest, self.d.vector_width)
        self.vectors = sizes.size(sizes.numel([loop.extent for loop in self.nest.loops]) // self.d.vector_width)
        self.taken = {b.name for b in tile.kernel.inputs + tile.kernel.outputs} | {loop.var for loop in self.nest.loops}
        self.vector = ex.Var(fresh_name("vector", self.taken))
        one_vector = self.d.vectors_per_thread == 1 and self.d.steps == 1
        self.first = self.vector if one_vector else ex.Var(fresh_name("first_vector", self.taken))
        self.step = ex.Var(fresh_name("step", self.taken))
        self.slot: Expr = ex.Var(fresh_name("slot", self.taken)) if self.d.vectors_per_thread > 1 else ex.const(0)
        self.registers: dict[loop_ir.Load | loop_ir.Store, kernel_ir.Array] = {}
        shape = (self.d.vectors_per_thread, self.d.vector_width)
        for access in self.plan.vector_loads + self.plan.vector_stores:
            dtype = tile.kernel.buffer(access.buffer).type.dtype
            name = fresh_name(f"{access.buffer}_vector", self.taken)
            self.registers[access] = kernel_ir.Array(name, dtype, shape, "register")
        self.coordinates = self._coordinates()
        self.conditions = {c: ex.Var(fresh_name("condition", self.taken), dtypes.bool_) for c in self.plan.conditions}

    def kernel(self) -> kernel_ir.Kernel:
        d = self.d
        start = index.simplify(kernel_ir.block_idx("x") * d.vectors_per_block + kernel_ir.thread_idx("x"))
        body: list[kernel_ir.Stmt] = [kernel_ir.Declare(self.first.name, self.first.dtype, start)]
        per_step = self._step()
        if d.steps > 1:
            body.append(kernel_ir.For(self.step.name, ex.const(0), ex.const(d.steps), 1, per_step))
        else:
            body += per_step
        return kernel_ir.Kernel(
            name=self.loop_kernel.name,
            params=loop_to_kernel.params(self.loop_kernel),
            arrays=tuple(self.registers.values()),
            body=tuple(body),
            launch=kernel_ir.Launch((d.blocks, 1, 1), (d.threads, 1, 1)),
            sizes=loop_to_kernel.size_params(self.loop_kernel),
        )

    def _step(self) -> list[kernel_ir.Stmt]:
        """One step: the loads of every slot, then the arithmetic and stores of every slot."""
        if self.d.vectors_per_thread == 1:
            return self._slot(_merged(self._loads() + self._compute()))
        loads = self._loads()
        halves = ([self._slot(loads)] if loads else []) + [self._slot(self._compute())]
        return [kernel_ir.For(self.slot.name, ex.const(0), ex.const(self.d.vectors_per_thread), 1, tuple(half),
                              unroll=True) for half in halves]

    def _slot(self, work: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """``work`` for the vector in ``slot``: its index, the guard, the coordinates ``work`` uses."""
        d = self.d
        position = self.first
        if d.steps > 1:
            position = position + self.step * (d.vectors_per_thread * d.threads)
        if d.vectors_per_thread > 1:
            position = position + self.slot * d.threads
        statements: list[kernel_ir.Stmt] = []
        if position != self.vector:
            statements.append(kernel_ir.Declare(self.vector.name, self.vector.dtype, index.simplify(position)))
        inside = self._declarations(work) + work
        if d.blocks * d.vectors_per_block != self.vectors:
            statements.append(kernel_ir.If(ex.op("lt", self.vector, self.vectors), tuple(inside)))
        else:
            statements += inside
        return statements

    def _coordinates(self) -> dict[str, Expr]:
        """Each loop variable at the vector's first element, row-major from ``vector``."""
        width = self.d.vector_width
        extents = tuple(loop.extent for loop in self.nest.loops[:-1]) + (self.nest.inner_extent // width,)
        points = self.vectors if sizes.is_symbolic(self.vectors) else max(self.vectors, 1)
        coordinates = list(index.delinearize(self.vector, extents, {self.vector.name: points}))
        coordinates[-1] = index.simplify(coordinates[-1] * width)
        return {loop.var: c for loop, c in zip(self.nest.loops, coordinates)}

    def _declarations(self, work: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
        """The coordinates and the conditions that ``work`` reads by name."""
        used = set()
        for s in kernel_ir.statements(tuple(work)):
            for e in kernel_ir.expressions(s):
                used |= ex.free_vars(e)
        conditions = []
        for condition, var in self.conditions.items():
            if var.name in used:
                value = loop_to_kernel.translate_expr(condition, self.loop_kernel, self._element_env(0))
                conditions.append(kernel_ir.Declare(var.name, var.dtype, value))
                used |= ex.free_vars(value)
        coordinates = [kernel_ir.Declare(var, dtypes.index, value) for var, value in self.coordinates.items()
                       if var in used and not isinstance(value, (ex.Var, ex.Const))]
        return coordinates + conditions

    def _element_env(self, element: int) -> dict[str, Expr]:
        """Loop variables at element ``element`` of the vector, by the names of their declarations."""
        env = {var: value if isinstance(value, (ex.Var, ex.Const)) else ex.Var(var)
               for var, value in self.coordinates.items()}
        inner = self.nest.inner
        env[inner] = index.simplify(env[inner] + element)
        return env

    def _offset(self, buffer: str, idx: tuple[Expr, ...]) -> Expr:
        """The offset of ``buffer[idx]`` at the vector's first element, from ``vector``.

        Where the buffer is walked like the loop nest over its innermost loops (strides
        equal to the nest's), those loops together are one run of the flat position,
        ``vector % (run / W) * W``, rather than a sum of divisions and remainders. An
        offset with remainders or divisions (``i3 % 64 + 64``) is written with the
        coordinates, as the scalar loads of the same kernel would be.
        """
        offset = index.linearize(idx, self.loop_kernel.buffer(buffer).type.shape)
        form = index.affine(offset)
        loops = self.nest.loops
        if not all(isinstance(atom, ex.Var) and atom.name in self.coordinates for atom in form.terms):
            return index.simplify(loop_to_kernel.translate_expr(offset, self.loop_kernel, self._element_env(0)))
        coefficient = {atom.name: c for atom, c in form.terms.items()}
        stride, run = 1, len(loops)
        while run > 0 and (loops[run - 1].extent == 1 or coefficient.get(loops[run - 1].var, 0) == stride):
            stride *= loops[run - 1].extent
            run -= 1
        width = self.d.vector_width
        walked = self.vector * width if run == 0 else (self.vector % (stride // width)) * width
        outer = (coefficient.get(loop.var, 0) * self.coordinates[loop.var] for loop in loops[:run])
        rest = sum(outer, ex.const(form.constant))
        return index.simplify(walked + rest)

    def _chunks(self, buffer: str) -> tuple[int, int]:
        """How many accesses a vector of ``buffer`` takes, and how many elements each moves."""
        itemsize = self.loop_kernel.buffer(buffer).type.dtype.itemsize
        width = min(self.d.vector_width, VECTOR_BYTES // itemsize)
        return self.d.vector_width // width, width

    def _loads(self) -> list[kernel_ir.Stmt]:
        return self._guarded_loads([(load, self.plan.guard(load)) for load in self.plan.vector_loads])

    def _guarded_loads(self, loads: list[tuple[loop_ir.Load, Guard]]) -> list[kernel_ir.Stmt]:
        """The loads needed everywhere, then under one ``if``/``else`` per condition those
        each of its branches needs."""
        out: list[kernel_ir.Stmt] = []
        for load, guard in loads:
            if not guard:
                out += self._vector_load(load)
        for condition in dict.fromkeys(guard[0].condition for _, guard in loads if guard):
            sides = {taken: self._guarded_loads([(load, guard[1:]) for load, guard in loads
                                                 if guard and guard[0].condition == condition
                                                 and guard[0].taken == taken])
                     for taken in (True, False)}
            if sides[True]:
                out.append(kernel_ir.If(self.conditions[condition], tuple(sides[True]), tuple(sides[False])))
            else:
                out.append(kernel_ir.If(ex.op("not", self.conditions[condition]), tuple(sides[False])))
        return out

    def _vector_load(self, load: loop_ir.Load) -> list[kernel_ir.Stmt]:
        offset, register = self._offset(load.buffer, load.index), self.registers[load].name
        count, width = self._chunks(load.buffer)
        return [kernel_ir.VectorLoad(register, (self.slot, ex.const(chunk * width)), load.buffer,
                                     (index.simplify(offset + chunk * width),), width)
                for chunk in range(count)]

    def _compute(self) -> list[kernel_ir.Stmt]:
        out: list[kernel_ir.Stmt] = []
        for store in self.nest.stores:
            register = self.registers.get(store)
            kept = self.plan.kept_where_not(store)
            value = store.value if kept is None else store.value.args[1]
            if _copies(value, self.conditions) <= MAX_ARITHMETIC_COPIES:
                computed = self._decided(store, value)
            else:
                computed = self._elements(store, value)
            stores: list[kernel_ir.Stmt] = []
            if register is not None:
                offset = self._offset(store.buffer, store.index)
                count, width = self._chunks(store.buffer)
                for chunk in range(count):
                    first = chunk * width
                    stores.append(kernel_ir.VectorStore(store.buffer, (index.simplify(offset + first),), register.name,
                                                        (self.slot, ex.const(first)), width))
            if kept is None:
                out += computed + stores
            elif register is not None:  # the value computed into registers everywhere, stored where it is kept
                out += computed + [kernel_ir.If(self.conditions[kept], tuple(stores))]
            else:
                out.append(kernel_ir.If(self.conditions[kept], tuple(computed)))
        return out

    def _decided(self, store: loop_ir.Store, value: Expr) -> list[kernel_ir.Stmt]:
        """The elements of ``store``, under one ``if``/``else`` per condition evaluated once per
        vector that ``value`` selects with, each side with that ``where`` resolved."""
        condition = _first_condition(value, self.conditions)
        if condition is None:
            return self._elements(store, value)
        sides = (self._decided(store, _resolved(value, condition, taken)) for taken in (True, False))
        return [kernel_ir.If(self.conditions[condition], *map(tuple, sides))]

    def _elements(self, store: loop_ir.Store, value: Expr) -> list[kernel_ir.Stmt]:
        out: list[kernel_ir.Stmt] = []
        register = self.registers.get(store)
        for element in range(self.d.vector_width):
            env = self._element_env(element)
            computed = loop_to_kernel.translate_expr(self._with_registers(value, element), self.loop_kernel, env)
            if register is not None:
                out.append(kernel_ir.Store(register.name, (self.slot, ex.const(element)), computed))
            else:
                idx = tuple(loop_to_kernel.translate_expr(i, self.loop_kernel, env) for i in store.index)
                shape = self.loop_kernel.buffer(store.buffer).type.shape
                out.append(kernel_ir.Store(store.buffer, (index.linearize(idx, shape),), computed))
        return out

    def _with_registers(self, value: Expr, element: int) -> Expr:
        """``value`` reading element ``element`` of the registers wherever a vector load
        holds it, and the conditions evaluated once per vector by their names."""
        if isinstance(value, loop_ir.Load):
            if value in self.registers:
                return kernel_ir.Load(self.registers[value].name, (self.slot, ex.const(element)), value.dtype)
            return value
        if isinstance(value, ex.Op) and value.op == "where" and value.args[0] in self.conditions:
            condition, *branches = value.args
            return value.rebuild((self.conditions[condition], *(self._with_registers(b, element) for b in branches)))
        children = value.children()
        return value.rebuild(tuple(self._with_registers(c, element) for c in children)) if children else value


def _first_condition(value: Expr, conditions: dict[Expr, ex.Var]) -> Expr | None:
    """The first of ``conditions`` that a ``where`` of ``value`` selects with, outermost first."""
    if isinstance(value, loop_ir.Load):
        return None
    if isinstance(value, ex.Op) and value.op == "where" and value.args[0] in conditions:
        return value.args[0]
    for child in value.children():
        found = _first_condition(child, conditions)
        if found is not None:
            return found
    return None


def _copies(value: Expr, conditions: dict[Expr, ex.Var]) -> int:
    """How many copies of ``value`` branching on every condition it selects with makes,
    counted up to one past ``MAX_ARITHMETIC_COPIES``."""
    condition = _first_condition(value, conditions)
    if condition is None:
        return 1
    taken = _copies(_resolved(value, condition, True), conditions)
    if taken > MAX_ARITHMETIC_COPIES:
        return taken
    return taken + _copies(_resolved(value, condition, False), conditions)


def _resolved(value: Expr, condition: Expr, taken: bool) -> Expr:
    """``value`` where ``condition`` is known to hold (``taken``) or not."""
    if isinstance(value, loop_ir.Load) or not value.children():
        return value
    if isinstance(value, ex.Op) and value.op == "where" and value.args[0] == condition:
        return _resolved(value.args[1] if taken else value.args[2], condition, taken)
    return value.rebuild(tuple(_resolved(child, condition, taken) for child in value.children()))


def _merged(statements: list[kernel_ir.Stmt]) -> list[kernel_ir.Stmt]:
    """``statements`` with each run of ``if``s on one condition made one ``if``: a guarded
    load and the arithmetic on it, on the same side."""
    out: list[kernel_ir.Stmt] = []
    for s in statements:
        last = out[-1] if out else None
        if isinstance(s, kernel_ir.If) and isinstance(last, kernel_ir.If) and last.cond == s.cond:
            out[-1] = kernel_ir.If(s.cond, tuple(_merged([*last.then, *s.then])),
                                   tuple(_merged([*last.orelse, *s.orelse])))
        else:
            out.append(s)
    return out

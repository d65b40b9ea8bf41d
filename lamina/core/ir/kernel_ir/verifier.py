"""Checks that a Kernel IR kernel is consistent before a backend prints or runs it: names
declared before use, ranks, spaces and types of what each statement reads and writes, and the
launch's limits. Each problem is a sentence; all of them go into one ``VerificationError``."""

from __future__ import annotations

import math

from lamina.core.errors import VerificationError
from lamina.core.ir import dtypes, expr as ex, sizes
from lamina.core.ir.kernel_ir.hopper import (
    K_MAJOR,
    MAX_CLUSTER_BLOCKS,
    N_MAJOR,
    REGISTER_VALUES,
    SWIZZLE_BYTES,
    SWIZZLE_PANEL,
    WGMMA_A_SOURCES,
    WGMMA_B_LAYOUTS,
    WGMMA_OPERAND_DTYPES,
    ClusterLoad,
    LetNextKernelLaunch,
    WaitForPreviousKernel,
    Wgmma,
    register_dtype,
)
from lamina.core.ir.kernel_ir.hopper_barriers import MBARRIER_STATEMENTS
from lamina.core.ir.kernel_ir.hopper_checks import (
    barrier_access_problems,
    barrier_arrays,
    mbarrier_problems,
    tensor_map_problems,
    tma_load_problems,
    tma_store_problems,
)
from lamina.core.ir.kernel_ir.hopper_tma import TmaLoad, TmaStore
from lamina.core.ir.kernel_ir.nodes import (
    LOAD_CACHE_HINTS,
    SPECIALS,
    STORE_CACHE_HINTS,
    VECTOR_BYTES,
    WARP_SIZE,
    Array,
    AtomicAdd,
    Assign,
    Comment,
    CpAsync,
    Declare,
    Divergent,
    For,
    If,
    Kernel,
    Load,
    Mma16,
    MmaTf32,
    PackedPair,
    Param,
    Program,
    ShuffleXor,
    Special,
    Store,
    Tf32,
    VectorLoad,
    VectorStore,
)
from lamina.core.ir.kernel_ir.printer import format_expr
from lamina.core.ir.kernel_ir.traversal import expressions, statements


def verify_kernel(k: Kernel, max_threads: int = 1024, max_shared_bytes: int = 48 * 1024) -> None:
    problems: list[str] = []
    arrays = {a.name: a for a in k.params + k.arrays}
    maps = {m.name: m for m in k.tensor_maps}
    for m in k.tensor_maps:
        problems.extend(tensor_map_problems(m, arrays))
    problems.extend(barrier_access_problems(k.body, barrier_arrays(k.body)))
    for a in k.arrays:
        if a.space not in ("shared", "register"):
            problems.append(f"array {a.name} is in unknown space {a.space}")
        problems.extend(_swizzle_problems(a))

    def rank(name):
        a = arrays[name]
        return 1 if isinstance(a, Param) else len(a.shape)

    def check_expr(e, scope):
        for node in ex.walk(e):
            if isinstance(node, Load):
                if node.array not in arrays:
                    problems.append(f"load from unknown array {node.array}")
                elif len(node.index) != rank(node.array):
                    problems.append(f"load from {node.array} with {len(node.index)} indices; it has rank {rank(node.array)}")
            elif isinstance(node, ex.Var) and node.name not in scope:
                problems.append(f"variable {node.name} is used before it is declared")
            elif isinstance(node, Special) and (node.kind not in SPECIALS or node.axis not in ("x", "y", "z")):
                problems.append(f"unknown special {node.kind}.{node.axis}")
            elif isinstance(node, ClusterLoad):
                array = arrays.get(node.array)
                if not isinstance(array, Array) or array.space != "shared":
                    problems.append(f"cluster load from {node.array}: it is not a shared array")
                elif len(node.index) != len(array.shape):
                    problems.append(f"cluster load from {node.array} with {len(node.index)} indices; "
                                    f"it has rank {len(array.shape)}")
                elif node.dtype != dtypes.float32:
                    problems.append(f"cluster load of {node.dtype} from {node.array}: only f32 is supported")
            elif isinstance(node, Tf32) and node.value.dtype != dtypes.float32:
                problems.append(f"tf32 rounding of a {node.value.dtype} value; it rounds f32 values")
            elif isinstance(node, PackedPair) and (node.pair_dtype not in (dtypes.bfloat16, dtypes.float16)
                                                   or {node.low.dtype, node.high.dtype} != {dtypes.float32}):
                problems.append(f"a pair of {node.pair_dtype} from {node.low.dtype} and {node.high.dtype} values; a "
                                "packed pair rounds two f32 values to bf16 or f16")
            elif isinstance(node, ShuffleXor):
                if not 0 < node.lane_mask < WARP_SIZE:
                    problems.append(f"shuffle lane mask {node.lane_mask} is outside 1..{WARP_SIZE - 1}")
                if node.dtype == dtypes.bool_:
                    problems.append("shuffle of a bool value; shuffle an integer or floating-point value")

    def visit(body, scope):
        scope = set(scope)
        for s in body:
            for e in expressions(s):
                check_expr(e, scope)
            if isinstance(s, Declare):
                scope.add(s.var)
            elif isinstance(s, Assign) and s.var not in scope:
                problems.append(f"assignment to undeclared {s.var}")
            elif isinstance(s, Store):
                if s.array not in arrays:
                    problems.append(f"store to unknown array {s.array}")
                elif isinstance(arrays[s.array], Param) and not arrays[s.array].writable:
                    problems.append(f"store to input parameter {s.array}")
                elif len(s.index) != rank(s.array):
                    problems.append(f"store to {s.array} with {len(s.index)} indices; it has rank {rank(s.array)}")
            elif isinstance(s, For):
                visit(s.body, scope | {s.var})
            elif isinstance(s, If):
                visit(s.then, scope)
                visit(s.orelse, scope)
            elif isinstance(s, Divergent):
                if s.count < 1:
                    problems.append(f"divergent groups of {format_expr(s.group)}: {s.count}; at least one")
                visit(s.body, scope)
            elif isinstance(s, CpAsync):
                dst, src = arrays.get(s.dst), arrays.get(s.src)
                if not isinstance(dst, Array) or dst.space != "shared":
                    problems.append(f"cp.async destination {s.dst} is not a shared array")
                if not isinstance(src, Param):
                    problems.append(f"cp.async source {s.src} is not a global parameter")
                if s.bytes not in (4, 8, 16):
                    problems.append(f"cp.async copies 4, 8 or 16 bytes, not {s.bytes}")
            elif isinstance(s, (VectorLoad, VectorStore)):
                problems.extend(_vector_access_problems(s, arrays))
            elif isinstance(s, MmaTf32):
                problems.extend(_mma_problems(s, arrays))
            elif isinstance(s, Mma16):
                problems.extend(_mma16_problems(s, arrays))
            elif isinstance(s, Wgmma):
                problems.extend(_wgmma_problems(s, arrays))
            elif isinstance(s, MBARRIER_STATEMENTS):
                problems.extend(mbarrier_problems(s, arrays, k.launch.cluster[0]))
            elif isinstance(s, TmaLoad):
                problems.extend(tma_load_problems(s, arrays, maps, k.launch.cluster[0]))
            elif isinstance(s, TmaStore):
                problems.extend(tma_store_problems(s, arrays, maps))
            elif isinstance(s, AtomicAdd):
                problems.extend(_atomic_problems(s, arrays))

    undeclared = sorted({name for p in k.params for name in sizes.symbols(p.numel)}
                        | {name for g in k.launch.grid for name in sizes.symbols(g)})
    problems += [f"the launch or a parameter's size uses {name}, which is not among its sizes"
                 for name in undeclared if name not in k.sizes]
    problems += [f"size {name} is not a symbol (s0, s1, ...)" for name in k.sizes if not sizes.is_symbol_name(name)]
    visit(k.body, set(k.sizes))
    problems.extend(_overlap_problems(k))
    problems.extend(f"scratch parameter {p.name} is not writable" for p in k.params if p.scratch and not p.writable)
    cluster = k.launch.cluster
    if len(cluster) != 3 or cluster[1:] != (1, 1) or not 1 <= cluster[0] <= MAX_CLUSTER_BLOCKS:
        problems.append(f"cluster {tuple(cluster)}: clusters are 1 to {MAX_CLUSTER_BLOCKS} blocks along x")
    elif cluster[0] > 1 and (sizes.is_symbolic(k.launch.grid[0]) or k.launch.grid[0] % cluster[0]):
        problems.append(f"grid x of {k.launch.grid[0]} blocks is not a whole number of clusters of {cluster[0]}")
    if k.launch.threads_per_block > max_threads:
        problems.append(f"{k.launch.threads_per_block} threads per block exceed {max_threads}")
    if k.shared_bytes > max_shared_bytes + k.launch.dynamic_shared_bytes:
        problems.append(f"{k.shared_bytes} B of shared memory exceed the limit")
    if problems:
        raise VerificationError(f"Kernel IR {k.name} is inconsistent:\n  " + "\n  ".join(problems))


def _overlap_problems(k: Kernel) -> list[str]:
    """A kernel launched to overlap the previous one must wait for it first; no other kernel waits."""
    first = next((s for s in k.body if not isinstance(s, (LetNextKernelLaunch, Comment))), None)
    if k.launch.overlaps_previous_kernel and not isinstance(first, WaitForPreviousKernel):
        return ["its launch overlaps the previous kernel's, so its body must start by waiting for that kernel "
                "(after at most letting the next kernel launch, and comments)"]
    if not k.launch.overlaps_previous_kernel and any(isinstance(s, WaitForPreviousKernel) for s in statements(k.body)):
        return ["it waits for the previous kernel, but its launch does not overlap that kernel's"]
    return []


def _vector_access_problems(s: VectorLoad | VectorStore, arrays: dict) -> list[str]:
    """What is wrong with a vector access, as far as it can be seen without running it:
    misalignment shows here only where an index is a constant."""
    kind = "vector load" if isinstance(s, VectorLoad) else "vector store"
    if isinstance(s, VectorLoad):
        (memory, memory_index), (register, register_index) = (s.src, s.src_index), (s.dst, s.dst_index)
    else:
        (memory, memory_index), (register, register_index) = (s.dst, s.dst_index), (s.src, s.src_index)
    param, array = arrays.get(memory), arrays.get(register)
    problems = []
    shared = isinstance(param, Array) and param.space == "shared"
    rank = len(param.shape) if shared else 1
    if not isinstance(param, Param) and not shared:
        problems.append(f"{kind} of {memory}: it is not a global parameter or a shared array")
    elif isinstance(s, VectorStore) and isinstance(param, Param) and not param.writable:
        problems.append(f"{kind} to input parameter {memory}")
    elif len(memory_index) != rank:
        problems.append(f"{kind} of {memory} with {len(memory_index)} indices; it has rank {rank}")
    if not isinstance(array, Array) or array.space != "register":
        problems.append(f"{kind} of {memory} through {register}: it is not a register array")
    elif len(register_index) != len(array.shape):
        problems.append(f"{kind} through {register} with {len(register_index)} indices; it has rank {len(array.shape)}")
    hints = LOAD_CACHE_HINTS if isinstance(s, VectorLoad) else STORE_CACHE_HINTS
    if s.cache not in hints:
        problems.append(f"{kind} of {memory} with cache hint {s.cache!r}; it takes {', '.join(hints)}")
    elif s.cache != "default" and not isinstance(param, Param):
        problems.append(f"{kind} of shared array {memory} with cache hint {s.cache!r}; hints apply to global memory")
    if problems:
        return problems
    if param.dtype != array.dtype:
        problems.append(f"{kind} between {param.dtype} {memory} and {array.dtype} {register}: the types must match")
    if s.width < 2 or s.width * param.dtype.itemsize not in VECTOR_BYTES:
        sizes = ", ".join(map(str, VECTOR_BYTES))
        problems.append(f"{kind} of {s.width} {param.dtype} elements of {memory}: it moves {sizes} bytes, "
                        f"at least 2 elements")
    for name, rows in ((register, array), (memory, param if shared else None)):
        if rows is not None and rows.shape[-1] % s.width:
            problems.append(f"{kind} through {name}: its rows of {rows.shape[-1]} elements are not a whole "
                            f"number of {s.width}-element vectors, so not every vector is aligned")
    for name, idx in ((memory, memory_index[-1]), (register, register_index[-1])):
        if isinstance(idx, ex.Const) and int(idx.value) % s.width:
            problems.append(f"{kind} at element {int(idx.value)} of {name} is not aligned to {s.width} elements")
    last = register_index[-1]
    if isinstance(last, ex.Const) and int(last.value) + s.width > array.shape[-1]:
        problems.append(f"{kind} through {register} at {int(last.value)}..{int(last.value) + s.width - 1} "
                        f"runs past its {array.shape[-1]} elements")
    return problems


def _atomic_problems(s: AtomicAdd, arrays: dict) -> list[str]:
    memory, register = arrays.get(s.array), arrays.get(s.dst)
    if not isinstance(memory, Param) or not memory.writable:
        return [f"atomic add to {s.array}: it must be a writable global parameter"]
    if not isinstance(register, Array) or register.space != "register":
        return [f"atomic add to {s.array} returns into {s.dst}: it must be a register array"]
    if len(s.dst_index) != len(register.shape):
        return [f"atomic add returns into {s.dst} with {len(s.dst_index)} indices; it has rank {len(register.shape)}"]
    if memory.dtype != dtypes.int32 or register.dtype != dtypes.int32:
        return [f"atomic add to {memory.dtype} {s.array} into {register.dtype} {s.dst}: both must be int32"]
    return []


def _accumulator_problems(kind: str, s: MmaTf32 | Mma16 | Wgmma, arrays: dict) -> list[str]:
    acc = arrays.get(s.acc)
    if not isinstance(acc, Array) or acc.space != "register" or acc.dtype != dtypes.float32:
        return [f"{kind} accumulates into {s.acc}: it must be an f32 register array"]
    if any(len(i) != len(acc.shape) for i in s.acc_index):
        return [f"{kind} accumulator of {s.acc} indexed with the wrong number of indices; it has rank "
                f"{len(acc.shape)}"]
    return []


def _mma_problems(s: MmaTf32, arrays: dict) -> list[str]:
    problems = _accumulator_problems("mma", s, arrays)
    if (len(s.acc_index), len(s.a), len(s.b)) != (4, 4, 2):
        problems.append(f"mma m16n8k8 takes 4 accumulators, 4 values of A and 2 of B per lane, not "
                        f"{len(s.acc_index)}, {len(s.a)} and {len(s.b)}")
    if any(v.dtype != dtypes.float32 for v in s.a + s.b):
        problems.append("mma operands must be f32 values (of which the tensor cores read the tf32 part)")
    return problems


def _mma16_problems(s: Mma16, arrays: dict) -> list[str]:
    problems = _accumulator_problems("mma", s, arrays)
    if (len(s.acc_index), len(s.a), len(s.b)) != (4, 4, 2):
        problems.append(f"mma m16n8k16 takes 4 accumulators, 4 words of A and 2 of B per lane, not "
                        f"{len(s.acc_index)}, {len(s.a)} and {len(s.b)}")
    if s.operand_dtype not in (dtypes.bfloat16, dtypes.float16):
        problems.append(f"mma m16n8k16 multiplies bf16 or f16 operands, not {s.operand_dtype}")
    if any(v.dtype != dtypes.int32 for v in s.a + s.b):
        problems.append("mma m16n8k16 operands must be 32-bit words of two 16-bit values (packed pairs)")
    return problems


def _swizzle_problems(a: Array) -> list[str]:
    if not a.swizzle:
        return []
    if a.swizzle != SWIZZLE_BYTES:
        return [f"array {a.name} has a {a.swizzle}-byte swizzle; Kernel IR knows only the {SWIZZLE_BYTES}-byte one"]
    if a.space != "shared":
        return [f"array {a.name} is swizzled but lives in {a.space} memory; only shared arrays are swizzled"]
    if a.shape[-1] * a.dtype.itemsize != SWIZZLE_BYTES:
        return [f"swizzled array {a.name} has rows of {a.shape[-1] * a.dtype.itemsize} bytes; "
                f"its last axis must span {SWIZZLE_BYTES} bytes"]
    if math.prod(a.shape[:-1]) % 8:
        return [f"swizzled array {a.name} has {math.prod(a.shape[:-1])} rows, not a whole number of the "
                "swizzle's 8-row pattern"]
    return []


def _wgmma_problems(s: Wgmma, arrays: dict) -> list[str]:
    problems = _accumulator_problems("wgmma", s, arrays)
    if s.operand_dtype not in WGMMA_OPERAND_DTYPES:
        return problems + [f"wgmma on {s.operand_dtype} operands; it takes "
                           f"{', '.join(d.name for d in WGMMA_OPERAND_DTYPES)}"]
    if s.n % 8 or not 8 <= s.n <= 256:
        problems.append(f"wgmma m64nNk{s.k} takes n a multiple of 8 from 8 to 256, not {s.n}")
    elif len(s.acc_index) != s.n // 2:
        problems.append(f"wgmma m64n{s.n}k{s.k} takes {s.n // 2} accumulators per thread, not {len(s.acc_index)}")
    operands = [(s.b, s.b_index)] if s.b_layout == K_MAJOR else []
    if s.b_layout not in WGMMA_B_LAYOUTS:
        problems.append(f"wgmma reads B {s.b_layout!r}; it reads B {' or '.join(WGMMA_B_LAYOUTS)}")
    elif s.b_layout == N_MAJOR:
        problems.extend(_n_major_b_problems(s, arrays))
    if s.a_from not in WGMMA_A_SOURCES:
        problems.append(f"wgmma reads A from {s.a_from!r}; it reads A from {' or '.join(WGMMA_A_SOURCES)}")
    elif s.a_from == "registers":
        problems.extend(_register_a_problems(s, arrays))
    elif not isinstance(s.a, str):
        problems.append("wgmma with A from shared memory takes the name of A's shared array, not values of A")
    else:
        operands.insert(0, (s.a, s.a_index))
    for name, idx in operands:
        operand = arrays.get(name)
        if not isinstance(operand, Array) or operand.space != "shared" or operand.dtype != s.operand_dtype \
                or operand.swizzle != SWIZZLE_BYTES:
            problems.append(f"wgmma reads {name}: it must be a {s.operand_dtype} shared array in the "
                            f"{SWIZZLE_BYTES}-byte swizzle")
        elif len(idx) != len(operand.shape):
            problems.append(f"wgmma operand {name} indexed with {len(idx)} indices; it has rank {len(operand.shape)}")
        else:
            for what, value in (("row", idx[-2]), ("column", idx[-1])):
                if isinstance(value, ex.Const) and int(value.value) % 8:
                    problems.append(f"wgmma operand {name} starts at {what} {int(value.value)}, not a multiple of 8")
    return problems


def _n_major_b_problems(s: Wgmma, arrays: dict) -> list[str]:
    """B stored along n: panels of ``SWIZZLE_PANEL`` 16-bit columns, a 128-byte row per k."""
    operand = arrays.get(s.b)
    if s.operand_dtype == dtypes.float32:
        return ["wgmma reads B n-major only from 16-bit operands (tf32 takes B K-major)"]
    if not isinstance(operand, Array) or operand.space != "shared" or operand.dtype != s.operand_dtype \
            or operand.swizzle != SWIZZLE_BYTES or len(operand.shape) < 3 or operand.shape[-1] != SWIZZLE_PANEL:
        return [f"wgmma reads B n-major from {s.b}: it must be a {s.operand_dtype} shared array in the "
                f"{SWIZZLE_BYTES}-byte swizzle, of panels of {SWIZZLE_PANEL} columns (shape [..., panels, k, "
                f"{SWIZZLE_PANEL}])"]
    if len(s.b_index) != len(operand.shape):
        return [f"wgmma operand {s.b} indexed with {len(s.b_index)} indices; it has rank {len(operand.shape)}"]
    problems = []
    panel, row, column = s.b_index[-3:]
    if not (isinstance(column, ex.Const) and int(column.value) == 0):
        problems.append(f"wgmma reads B n-major from the first column of its panels, not {format_expr(column)}")
    if isinstance(row, ex.Const) and int(row.value) % 8:
        problems.append(f"wgmma operand {s.b} starts at k {int(row.value)}, not a multiple of 8")
    if isinstance(panel, ex.Const) and int(panel.value) + -(-s.n // SWIZZLE_PANEL) > operand.shape[-3]:
        problems.append(f"wgmma m64n{s.n} reads {-(-s.n // SWIZZLE_PANEL)} panels of {s.b} from panel "
                        f"{int(panel.value)}; it has {operand.shape[-3]}")
    return problems


def _register_a_problems(s: Wgmma, arrays: dict) -> list[str]:
    if isinstance(s.a, str) or s.a_index:
        return [f"wgmma with A from registers takes {REGISTER_VALUES} values of A per thread, not an array and an "
                "index"]
    if len(s.a) != REGISTER_VALUES:
        return [f"wgmma with A from registers takes {REGISTER_VALUES} values of A per thread, not {len(s.a)}"]
    dtype = register_dtype(s.operand_dtype)
    for value in s.a:
        source = arrays.get(value.array) if isinstance(value, Load) else None
        if not isinstance(source, Array) or source.space != "register" or source.dtype != dtype:
            held = "" if dtype == dtypes.float32 else f" (two {s.operand_dtype} elements a word)"
            return [f"wgmma reads A from {format_expr(value)}: each value of A must be an element of an {dtype.short} "
                    f"register array{held}, which the asynchronous protocol keeps unchanged until the wgmma is done"]
    return []


def verify_program(p: Program) -> None:
    for k in p.kernels:
        verify_kernel(k)

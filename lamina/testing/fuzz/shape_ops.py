"""The generator's shape ops: reshape, permute, broadcast, slice, cat and index.

Each takes the writer and a value and writes one line applying an op to it, or returns
None where the op does not fit the value.
"""

from __future__ import annotations

from lamina.testing.fuzz.writer import (
    MAX_ELEMENTS, MAX_RANK, Value, Writer, broadcast_shape, index_text, numel, with_size,
)


def reshape(w: Writer, v: Value) -> Value | None:
    shape = list(v.shape)
    options = []
    if len(shape) >= 2:
        i = w.rng.randrange(len(shape) - 1)
        options.append(shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:])
        options.append([numel(shape)])
    splits = [(i, f) for i, n in enumerate(shape) for f in (2, 3, 4) if n % f == 0 and n > f]
    if splits and len(shape) < MAX_RANK:
        i, f = w.rng.choice(splits)
        options.append(shape[:i] + [f, shape[i] // f] + shape[i + 1:])
    if not options:
        return None
    new = w.rng.choice(options)
    spelled = list(new)
    if w.rng.random() < 0.3:
        spelled[w.rng.randrange(len(new))] = -1
    method = w.rng.choice(("reshape", "reshape", "view")) if v.is_input else "reshape"
    return w.emit(f"{v.name}.{method}({', '.join(map(str, spelled))})", new, v.dtype, v.bound)


def squeeze_or_unsqueeze(w: Writer, v: Value) -> Value | None:
    ones = [k for k, n in enumerate(v.shape) if n == 1]
    if ones and w.rng.random() < 0.5:
        dim = w.rng.choice(ones)
        return w.emit(f"{v.name}.squeeze({dim})", v.shape[:dim] + v.shape[dim + 1:], v.dtype, v.bound)
    if len(v.shape) >= MAX_RANK:
        return None
    dim = w.rng.randrange(len(v.shape) + 1)
    return w.emit(f"{v.name}.unsqueeze({dim})", v.shape[:dim] + (1,) + v.shape[dim:], v.dtype, v.bound)


def permute(w: Writer, v: Value) -> Value | None:
    rank = len(v.shape)
    if rank < 2:
        return None
    if rank == 2 and w.rng.random() < 0.4:
        return w.emit(f"{v.name}.t()", v.shape[::-1], v.dtype, v.bound)
    if w.rng.random() < 0.4:
        a, b = w.rng.sample(range(rank), 2)
        shape = list(v.shape)
        shape[a], shape[b] = shape[b], shape[a]
        return w.emit(f"{v.name}.transpose({a}, {b})", shape, v.dtype, v.bound)
    order = list(range(rank))
    while order == sorted(order):
        w.rng.shuffle(order)
    return w.emit(f"{v.name}.permute({', '.join(map(str, order))})", [v.shape[k] for k in order], v.dtype, v.bound)


def expand(w: Writer, v: Value) -> Value | None:
    ones = [k for k, n in enumerate(v.shape) if n == 1]
    if ones and w.rng.random() < 0.6:
        shape = list(v.shape)
        for k in ones:
            shape[k] = w.size()
        if numel(shape) > MAX_ELEMENTS:
            return None
        spelled = [n if k in ones else -1 for k, n in enumerate(shape)]
        return w.emit(f"{v.name}.expand({', '.join(map(str, spelled))})", shape, v.dtype, v.bound)
    if len(v.shape) >= MAX_RANK:
        return None
    n = w.size()
    if n * numel(v.shape) > MAX_ELEMENTS:
        return None
    return w.emit(f"{v.name}.expand({', '.join(map(str, (n,) + v.shape))})", (n,) + v.shape, v.dtype, v.bound)


def slice_(w: Writer, v: Value) -> Value | None:
    dims = [k for k, n in enumerate(v.shape) if n >= 2]
    if not dims:
        return None
    dim = w.rng.choice(dims)
    n = v.shape[dim]
    form = w.rng.random()
    if form < 0.2:
        start, length = w.rng.randrange(n), 1
        length = w.rng.randint(1, n - start)
        return w.emit(f"{v.name}.narrow({dim}, {start}, {length})", with_size(v.shape, dim, length), v.dtype, v.bound)
    if form < 0.35:
        k = w.rng.randint(1, n - 1)
        return w.emit(f"{v.name}{index_text(dim, f'-{k}:')}", with_size(v.shape, dim, k), v.dtype, v.bound)
    start = w.rng.randrange(n)
    stop = w.rng.randint(start + 1, n)
    step = w.rng.choice((1, 1, 2, 3))
    item = f"{start or ''}:{stop if stop < n else ''}" + (f":{step}" if step > 1 else "")
    length = len(range(start, stop, step))
    return w.emit(f"{v.name}{index_text(dim, item)}", with_size(v.shape, dim, length), v.dtype, v.bound)


def cat(w: Writer, v: Value) -> Value | None:
    if not v.shape:
        return None
    dim = w.dim(v)
    if w.rng.random() < 0.2 and len(v.shape) < MAX_RANK and 2 * numel(v.shape) <= MAX_ELEMENTS:
        others = [u for u in w.values + w.inputs if u.shape == v.shape and u.dtype == v.dtype]
        u = w.rng.choice(others)
        dim = w.rng.randrange(len(v.shape) + 1)
        shape = v.shape[:dim] + (2,) + v.shape[dim:]
        return w.emit(f"torch.stack([{v.name}, {u.name}], {dim})", shape, v.dtype, max(v.bound, u.bound))
    matching = [u for u in w.values + w.inputs
                if u is not v and u.dtype == v.dtype and len(u.shape) == len(v.shape)
                and all(a == b for k, (a, b) in enumerate(zip(u.shape, v.shape)) if k != dim)]
    if matching and w.rng.random() < 0.5:
        u = w.rng.choice(matching)
    else:
        u = w.data_input(with_size(v.shape, dim, w.size()), v.dtype)
    shape = with_size(v.shape, dim, v.shape[dim] + u.shape[dim])
    if numel(shape) > MAX_ELEMENTS:
        return None
    parts = [v.name, u.name] if w.rng.random() < 0.6 else [u.name, v.name]
    if w.rng.random() < 0.25 and numel(with_size(shape, dim, shape[dim] + v.shape[dim])) <= MAX_ELEMENTS:
        parts.append(v.name)
        shape = with_size(shape, dim, shape[dim] + v.shape[dim])
    spelled = w.spelled_dim(v, dim)
    return w.emit(f"torch.cat([{', '.join(parts)}], {spelled})", shape, v.dtype, max(v.bound, u.bound))


def index(w: Writer, v: Value) -> Value | None:
    if not v.shape:
        return None
    dim = w.dim(v)
    n = v.shape[dim]
    form = w.rng.random()
    if form < 0.25:
        k = w.rng.randrange(-n, n)
        return w.emit(f"{v.name}{index_text(dim, str(k))}", v.shape[:dim] + v.shape[dim + 1:],
                      v.dtype, v.bound)
    count = w.size()
    if numel(with_size(v.shape, dim, count)) > MAX_ELEMENTS:
        return None
    if form < 0.35 and len(v.shape) >= 2 and v.shape[0] * v.shape[1] > 1:
        i, j = w.index_input((count,), v.shape[0]), w.index_input((count,), v.shape[1])
        return w.emit(f"{v.name}[{i.name}, {j.name}]", (count,) + v.shape[2:], v.dtype, v.bound)
    if form < 0.55:
        i = w.index_input((count,), n, negative=w.rng.random() < 0.3)
        return w.emit(f"{v.name}{index_text(dim, i.name)}", with_size(v.shape, dim, count), v.dtype, v.bound)
    if form < 0.8:
        i = w.index_input((count,), n)
        return w.emit(f"{v.name}.index_select({dim}, {i.name})", with_size(v.shape, dim, count), v.dtype, v.bound)
    shape = tuple(count if k == dim else w.rng.randint(1, s) for k, s in enumerate(v.shape))
    i = w.index_input(shape, n)
    return w.emit(f"torch.gather({v.name}, {dim}, {i.name})", shape, v.dtype, v.bound)


def other_shape_op(w: Writer, v: Value) -> Value | None:
    """Less common ops lamina supports: repeat, split, unbind, pad, tril, masked_fill, cumsum."""
    if not v.shape:
        return None
    dim = w.dim(v)
    n = v.shape[dim]
    form = w.rng.randrange(7)
    if form == 0 and 2 * numel(v.shape) <= MAX_ELEMENTS:
        times = [1] * len(v.shape)
        times[dim] = 2
        return w.emit(f"{v.name}.repeat({', '.join(map(str, times))})", with_size(v.shape, dim, 2 * n), v.dtype, v.bound)
    if form == 1 and n >= 2:
        size = w.rng.randint(1, n - 1)
        pieces = list(range(0, n, size))
        k = w.rng.randrange(len(pieces))
        length = min(size, n - pieces[k])
        return w.emit(f"{v.name}.split({size}, {dim})[{k}]", with_size(v.shape, dim, length), v.dtype, v.bound)
    if form == 2:
        k = w.rng.randrange(n)
        return w.emit(f"{v.name}.unbind({dim})[{k}]", v.shape[:dim] + v.shape[dim + 1:], v.dtype, v.bound)
    if form == 3 and not v.is_int:
        before, after = w.rng.randint(0, 2), w.rng.randint(1, 3)
        shape = with_size(v.shape, len(v.shape) - 1, v.shape[-1] + before + after)
        return w.emit(f"torch.nn.functional.pad({v.name}, ({before}, {after}), value=0.5)", shape, v.dtype,
                      max(v.bound, 0.5))
    if form == 4 and len(v.shape) >= 2:
        diagonal = w.rng.randint(-1, 1)
        function = w.rng.choice(("tril", "triu"))
        return w.emit(f"torch.{function}({v.name}, {diagonal})", v.shape, v.dtype, v.bound)
    if form == 5:
        mask = w.mask_input(v.shape)
        fill = "3" if v.is_int else "0.5"
        shape = broadcast_shape(mask.shape, v.shape)
        return w.emit(f"{v.name}.masked_fill({mask.name} > 0, {fill})", shape, v.dtype, max(v.bound, 3.0))
    if form == 6:
        dtype = "int64" if v.is_int else v.dtype
        return w.emit(f"{v.name}.cumsum({w.spelled_dim(v, dim)})", v.shape, dtype, v.bound * n)
    return None

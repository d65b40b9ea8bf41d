"""Knobs: decisions the user pins, each for the schedule or fusion rule that takes it.

A knob is pinned under the name of the schedule that takes it, ``contraction.block_k = 32``,
so that pinning ``threads`` for the pointwise schedule leaves the row-reduction and generic
schedules free. Each schedule and fusion rule declares the knobs it takes (``knob_names``,
see ``lamina.core.providers``) and receives only those, as a mapping from knob name to value.
A fusion rule that decides for a schedule (splitting a contraction across blocks) may share
that schedule's namespace (``knob_namespace``), so that ``contraction.split_k`` sits beside
``contraction.block_k``. A knob pinned for a schedule that does not exist, or that the
schedule does not take, is a ``ConfigError``: a typo never silently does nothing. Both name
the closest knob there is.

A knob pinned without a schedule (``block_k = 32``, ``LAMINA_KNOB_BLOCK_K``), the spelling
before namespaces, still pins every schedule and fusion rule that takes that name, and every
one that declares no knobs, with a ``FutureWarning`` naming the spellings to use (a
FutureWarning, which Python shows by default: whoever pins knobs uses lamina, and may never see
a DeprecationWarning). It stops
working in the next release. One that no schedule or fusion rule declares is a ``ConfigWarning``
naming the closest knob: it reaches only providers that declare no knobs, if any, and is most
likely a typo; it stays a warning, not an error, because such a provider may read it. A provider
that renames a knob lists the old name in ``former_knob_names`` for a release: pins of it still
reach the provider, which reads them as the new name and warns, and error messages list only
the current names.

After a program's kernels are scheduled, a knob pinned for a schedule that no kernel of the
program was scheduled by did nothing (``contraction.block_k`` on a program without a matmul):
a ``ConfigWarning`` says so once per compile, naming the schedules the kernels got. A knob of a
fusion rule pinned under a schedule's name (``contraction.split_k``) counts as that schedule's.
Under ``strict`` each ``ConfigWarning`` of this module is a ``ConfigError``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from lamina.core.errors import ConfigError, PluginError
from lamina.core.ineffective import does_nothing
from lamina.core.spelling import closest, did_you_mean

SEPARATOR = "."
"""Between a schedule's name and its knob's: ``contraction.block_k``."""
ENVIRONMENT_PREFIX = "LAMINA_KNOB_"
ENVIRONMENT_SEPARATOR = "__"
"""Between them in a variable's name, where a dot cannot go: ``LAMINA_KNOB_CONTRACTION__BLOCK_K``."""
KINDS = {"schedule": "schedule", "fusion_rule": "fusion rule"}


def knob_names(provider: Any) -> tuple[str, ...] | None:
    """The knobs ``provider`` declares it takes; None where it declares none (it then receives
    the knobs pinned without a schedule, until that spelling goes)."""
    names = getattr(provider, "knob_names", None)
    if names is None:
        return None
    if isinstance(names, str) or not all(
        isinstance(n, str) and n and SEPARATOR not in n and ENVIRONMENT_SEPARATOR not in n for n in names
    ):
        raise PluginError(
            f"{provider.name}: knob_names must be a tuple of knob names, each without '{SEPARATOR}' or "
            f"'{ENVIRONMENT_SEPARATOR}', not {names!r}"
        )
    return tuple(names)


def former_knob_names(provider: Any) -> tuple[str, ...]:
    """The renamed knobs ``provider`` still accepts under their old names, for one release."""
    return tuple(getattr(provider, "former_knob_names", ()))


def knob_namespace(provider: Any) -> str:
    """The name its knobs are pinned under: its ``knob_namespace``, else its own name."""
    return getattr(provider, "knob_namespace", None) or provider.name


def environment_name(knob: str) -> str:
    """The variable that pins ``knob`` (``contraction.block_k``) in the environment."""
    return ENVIRONMENT_PREFIX + knob.replace(SEPARATOR, ENVIRONMENT_SEPARATOR).upper()


def from_environment_name(suffix: str) -> str:
    """The knob a variable's name after ``LAMINA_KNOB_`` pins: ``CONTRACTION__BLOCK_K`` is ``contraction.block_k``."""
    parts = suffix.lower().split(ENVIRONMENT_SEPARATOR)
    if len(parts) > 2 or not all(parts):
        raise ConfigError(
            f"{ENVIRONMENT_PREFIX}{suffix}: expected {ENVIRONMENT_PREFIX}<SCHEDULE>{ENVIRONMENT_SEPARATOR}<KNOB>, "
            f"for example {environment_name('contraction.block_k')}"
        )
    return SEPARATOR.join(parts)


def namespaced(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """``knobs`` as one mapping from ``schedule.knob`` to value.

    Takes what TOML and Python callers write: a table per schedule (``{"contraction":
    {"block_k": 32}}``, which a TOML dotted key ``contraction.block_k = 32`` also reads as),
    dotted names, and names without a schedule, which stay as they are."""
    if not isinstance(knobs, Mapping):
        raise ConfigError(f"knobs must be a table of schedule.knob = value, not {knobs!r}")
    flat: dict[str, Any] = {}
    for key, value in knobs.items():
        if isinstance(value, Mapping):
            for knob, inner in value.items():
                flat[_checked(f"{key}{SEPARATOR}{knob}", inner)] = inner
        else:
            flat[_checked(key, value)] = value
    return flat


def _checked(name: str, value: Any) -> str:
    parts = name.split(SEPARATOR)
    if isinstance(value, Mapping) or len(parts) > 2 or not all(p.strip() for p in parts):
        raise ConfigError(
            f"knob {name!r}: a knob is pinned as schedule.knob = value (contraction.block_k = 32), "
            "in a [tool.lamina.knobs.<schedule>] table, or with a dotted name"
        )
    return name


def sort_out(pinned: Mapping[str, Any], providers: Mapping[str, Sequence[Any]],
             strict: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """The knobs each provider receives, by kind (``schedule``, ``fusion_rule``) and name.

    ``pinned`` maps ``schedule.knob`` (or, deprecated, a bare knob name) to its value. A knob
    pinned with a schedule's name wins over the same knob pinned without one. A bare knob that
    nothing declares is a warning, an error under ``strict``."""
    taken: dict[str, set[str]] = {}
    former: dict[str, set[str]] = {}
    undeclared: dict[str, list[str]] = {}
    for kind, members in providers.items():
        for provider in members:
            names = knob_names(provider)
            taken.setdefault(knob_namespace(provider), set()).update(names or ())
            former.setdefault(knob_namespace(provider), set()).update(former_knob_names(provider))
            if names is None:
                undeclared.setdefault(knob_namespace(provider), []).append(f"{KINDS[kind]} {provider.name}")
    _check_namespaced(pinned, taken, former, undeclared)
    _warn_unnamespaced(pinned, {n: taken[n] | former[n] for n in taken}, taken, strict)
    return {
        kind: {provider.name: _knobs_of(provider, pinned) for provider in members}
        for kind, members in providers.items()
    }


def _knobs_of(provider: Any, pinned: Mapping[str, Any]) -> dict[str, Any]:
    names = knob_names(provider)
    if names is None:
        return {k: v for k, v in pinned.items() if SEPARATOR not in k}
    names = (*names, *former_knob_names(provider))
    prefix = knob_namespace(provider) + SEPARATOR
    knobs = {k: v for k, v in pinned.items() if k in names}
    knobs.update({k[len(prefix):]: v for k, v in pinned.items() if k.startswith(prefix) and k[len(prefix):] in names})
    return knobs


def _check_namespaced(pinned: Mapping[str, Any], taken: Mapping[str, set[str]], former: Mapping[str, set[str]],
                      undeclared: Mapping[str, list[str]]) -> None:
    for name in pinned:
        if SEPARATOR not in name:
            continue
        namespace, knob = name.split(SEPARATOR)
        if namespace not in taken:
            hint = did_you_mean(name, _full_names(taken)) or did_you_mean(namespace, taken)
            raise ConfigError(
                f"knob {name}: no schedule or fusion rule is named {namespace!r}{hint}. "
                f"Knobs are pinned as {_every_knob(taken)}"
            )
        if knob not in taken[namespace] | former[namespace]:
            own = ", ".join(sorted(taken[namespace])) or "none"
            why = (f" ({' and '.join(undeclared[namespace])} declares no knob_names, and receives only knobs "
                   "pinned without a schedule's name)") if namespace in undeclared else ""
            elsewhere = [n for n in _full_names(taken) if n.endswith(SEPARATOR + knob)]
            hint = did_you_mean(knob, taken[namespace]) or did_you_mean(name, elsewhere)
            raise ConfigError(f"knob {name}: {namespace} takes no knob {knob!r}{hint}; its knobs: {own}{why}")


def _warn_unnamespaced(pinned: Mapping[str, Any], accepted: Mapping[str, set[str]],
                       taken: Mapping[str, set[str]], strict: bool) -> None:
    for name in pinned:
        if SEPARATOR in name:
            continue
        owners = sorted(namespace for namespace, names in accepted.items() if name in names)
        if not owners:
            _warn_undeclared(name, taken, strict)
            continue
        spellings = ", ".join(f"{o}{SEPARATOR}{name}" for o in owners)
        variables = ", ".join(environment_name(f"{o}{SEPARATOR}{name}") for o in owners)
        advice = f"pin it for the schedule that should take it: {spellings} (in the environment {variables})"
        warnings.warn(
            f"the knob {name}, pinned without a schedule, pins every schedule that takes it; this spelling "
            f"goes in the next release: {advice}",
            FutureWarning,
            stacklevel=2,
        )


def _warn_undeclared(name: str, taken: Mapping[str, set[str]], strict: bool) -> None:
    """A knob pinned without a schedule that nothing declares: most likely a typo of one that is."""
    bare = closest(name, (knob for names in taken.values() for knob in names))
    owners = sorted(namespace for namespace, names in taken.items() if bare in names)
    hint = (f"; the closest is {' or '.join(f'{o}{SEPARATOR}{bare}' for o in owners)} "
            f"({', '.join(environment_name(f'{o}{SEPARATOR}{bare}') for o in owners)})") if owners else ""
    does_nothing(
        f"the knob {name} does nothing: no schedule or fusion rule declares a knob {name!r}{hint}. "
        f"Knobs are pinned as {_every_knob(taken)}",
        strict,
        stacklevel=4,
    )


def warn_unused(pinned: Mapping[str, Any], providers: Mapping[str, Sequence[Any]], chosen: Sequence[Any],
                strict: bool = False) -> None:
    """Warn once for each pinned knob that no kernel's chosen schedule (``chosen``, one per kernel)
    received; an error under ``strict``.

    A knob is received by a schedule of the namespace it is pinned under, or, pinned without a
    schedule, by any schedule that takes it or declares no knobs. A fusion rule's knob pinned
    under a schedule's name (``contraction.split_k``) decides for that schedule's kernels, and
    counts as its; one pinned under a fusion rule's own name is always received (the rule sees
    every program). A knob that nothing declares was warned about when the knobs were sorted out."""
    schedule_namespaces = {knob_namespace(s) for s in providers.get("schedule", ())}
    chosen_namespaces = {knob_namespace(s) for s in chosen}
    for name, value in pinned.items():
        takers = [p for members in providers.values() for p in members
                  if knob_names(p) is not None and _knobs_of(p, {name: value})]
        namespaces = {knob_namespace(p) for p in takers}
        if not takers or namespaces - schedule_namespaces or namespaces & chosen_namespaces:
            continue
        if any(knob_names(s) is None and _knobs_of(s, {name: value}) for s in chosen):
            continue
        by = sorted({s.name for s in providers.get("schedule", ()) if knob_namespace(s) in namespaces})
        does_nothing(
            f"knob {name} = {value!r} was pinned, but no kernel of this program was scheduled by "
            f"{' or '.join(by)} (its kernels: {_kernel_counts(chosen)}); the pin has no effect",
            strict,
            stacklevel=3,
        )


def _kernel_counts(chosen: Sequence[Any]) -> str:
    counts = Counter(schedule.name for schedule in chosen)
    return ", ".join(f"{count} x {name}" for name, count in counts.items()) or "none"


def _full_names(taken: Mapping[str, Iterable[str]]) -> list[str]:
    return [f"{namespace}{SEPARATOR}{knob}" for namespace, names in taken.items() for knob in names]


def _every_knob(taken: Mapping[str, Iterable[str]]) -> str:
    listed = [f"{namespace}.{{{', '.join(sorted(names))}}}" for namespace, names in sorted(taken.items()) if names]
    return "; ".join(listed) or "nothing: no schedule or fusion rule takes knobs"

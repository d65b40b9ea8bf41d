"""Every extension point of lamina. This module is the public contract for plugins.

A plugin is a module or object with functions marked ``@lamina.hookimpl`` whose names
are hook names below. lamina loads its built-in plugins and every entry point of
the group ``lamina.plugins`` at the first compile, then calls the registration hooks
once each, in no guaranteed order: what a plugin registers must not depend on what
another registered first. Selection among providers is by priority and name only.

Hooks are only ever added, never changed or removed, so that a plugin written for
an older lamina keeps loading.
"""

from __future__ import annotations

import pluggy

PROJECT = "lamina"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def lamina_register_ops(register):
    """Register decompositions of ATen ops into Tensor IR primitives.

    Called once when the plugin manager is set up. ``register(op, decomposition,
    priority=0)`` takes the ATen op's full name as Torch IR prints it
    (``"aten.add.Tensor"``) and a callable ``decomposition(builder, node)`` that appends
    Elementwise / Reduction / IndexMap ops through ``builder``
    (``lamina.core.ir.tensor_builder.TensorBuilder``) and returns the name of the value
    holding the node's result. When several plugins register the same op, the highest
    priority wins, then the plugin whose name sorts first. Any plugin may implement it.
    Returns nothing.
    """


@hookspec
def lamina_register_fusion_rules(register):
    """Register fusion rules that rewrite Loop IR programs.

    Called once when the plugin manager is set up. ``register(rule)`` takes an object
    with ``name``, ``priority`` and ``apply(program, target, knobs) -> program | None``
    (see ``lamina.core.providers.FusionRule``): ``target`` is the device compiled for
    and ``knobs`` the decisions the user pinned for this rule. A rule that reads knobs
    declares them as a tuple ``knob_names``; the user pins them as ``<rule name>.<knob>``,
    or under the schedule the rule names in ``knob_namespace`` (``contraction.split_k``),
    and the rule receives only those. The pipeline applies rules, highest
    priority first, until none changes the program, starting again from the first
    after each change; a rule may make several changes in one call where their kernels
    share no buffer that a kernel writes, as the driver would have made them one call
    at a time. A rule must preserve the
    program's results and must never duplicate a reduction per use. Any plugin may
    implement it. Returns nothing.
    """


@hookspec
def lamina_register_schedules(register):
    """Register schedules that turn a Loop IR kernel into Tile IR and then Kernel IR.

    Called once when the plugin manager is set up. ``register(schedule)`` takes an
    object with ``name``, ``priority``, ``applies``, ``schedule`` and ``lower`` (see
    ``lamina.core.providers.Schedule``). For each kernel the pipeline takes the
    schedule that the config names, if it applies; otherwise the selection policy
    chooses among the applicable ones. A schedule that reads knobs declares them as a
    tuple ``knob_names``: the user pins them as ``<schedule name>.<knob>``
    (``contraction.block_k = 32``), the schedule receives only those in
    ``schedule(kernel, target, knobs)``, and a pinned knob that no schedule of that name
    declares is a ``ConfigError``. A kernel with sizes known only at run time goes only to
    schedules that declare ``symbolic_sizes = True``. Any plugin may implement it. Returns nothing.
    """


@hookspec
def lamina_register_kernel_passes(register):
    """Register passes over Kernel IR, run on every kernel after lowering.

    Called once when the plugin manager is set up. ``register(kernel_pass)`` takes an
    object with ``name``, ``priority`` and ``apply(kernel, target) -> kernel`` (see
    ``lamina.core.providers.KernelPass``); passes run highest priority first. A pass sees
    one kernel of each set that differ only in names (a model's repeated layers): the
    others take its result with their own names, so a pass must not decide by names. Any
    plugin may implement it. Returns nothing.
    """


@hookspec
def lamina_register_backends(register):
    """Register backends that run compiled programs.

    Called once when the plugin manager is set up. ``register(backend)`` takes an object
    with ``name``, ``available``, ``emit`` and ``load`` (see
    ``lamina.core.providers.Backend``). lamina picks the backend from the device of the
    inputs (``cuda`` for CUDA tensors, ``reference`` for CPU tensors) unless the config
    or the caller names one. Any plugin may implement it. Returns nothing.
    """


@hookspec
def lamina_register_targets(register):
    """Register compilation targets (``lamina.core.target.Target``: architecture and limits).

    Called once when the plugin manager is set up. ``register(target)``; the config's
    ``target`` names one, or the GPU in use picks the one whose ``arch`` matches. Any
    plugin may implement it. Returns nothing.
    """


@hookspec
def lamina_register_selection_policies(register):
    """Register policies that choose a schedule among those that apply to a kernel.

    Called once when the plugin manager is set up. ``register(policy)`` takes an object
    with ``name`` and ``choose(kernel, candidates, target)``, and optionally
    ``select(kernel, candidates, context)`` to pin knobs as well and ``cache_key(config)`` (see
    ``lamina.core.providers.SelectionPolicy`` and ``lamina.core.selection``). The config's
    ``selection`` names the policy in use; the default is ``cost_model``. Any plugin may
    implement it. Returns nothing.
    """


@hookspec
def lamina_observe_ir(level, ir, compilation):
    """See every IR level as it is produced: for dumps, tracing and visualisation.

    Called after each stage of every compile with ``level`` (one of ``torch``,
    ``tensor``, ``loop``, ``tile``, ``kernel``, ``cuda``), the IR object of that level
    and the ``lamina.core.pipeline.Compilation`` built so far. Must not change
    anything. Any plugin may implement it. Returns nothing.
    """

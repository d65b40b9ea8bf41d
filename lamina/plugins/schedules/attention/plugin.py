"""Registers the ``attention``, ``attention_decode`` and ``attention_float32`` schedules and the
fusion rules that give them their kernels."""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from lamina.core.errors import ScheduleError
from lamina.core.hookspecs import hookimpl
from lamina.core.ir import kernel_ir, loop_ir, tile_ir
from lamina.core.selection import Setting
from lamina.core.target import Target
from lamina.plugins.schedules.attention import tiling
from lamina.plugins.schedules.attention.decode import recognise as decode_recognise, tiling as decode_tiling
from lamina.plugins.schedules.attention.decode.fuse import FuseDecodeAttention
from lamina.plugins.schedules.attention.decode.writer import lower_decode_attention
from lamina.plugins.schedules.attention.float32 import recognise as float32_recognise, tiling as float32_tiling
from lamina.plugins.schedules.attention.float32.fuse import FuseFloat32Attention
from lamina.plugins.schedules.attention.float32.writer import lower_float32_attention
from lamina.plugins.schedules.attention.fuse_attention import FuseAttention
from lamina.plugins.schedules.attention.recognise import NotAttention, analyse
from lamina.plugins.schedules.attention.writer import lower_attention
from lamina.plugins.schedules.passing_over import tile_or_pass_over


class AttentionSchedule:
    """``softmax(q @ k^T) @ v`` in one pass over the keys, on Hopper's TMA and wgmma."""

    name = tiling.SCHEDULE_NAME
    priority = 15
    knob_names = tiling.KNOB_NAMES

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        if target.compute_capability != tiling.ARCH:
            return False
        try:
            analyse(kernel)
        except NotAttention:
            return False
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        """The kernel's Tile IR; where no setting can run it and none of this schedule's knobs is
        pinned, ``NoSettingRuns``, so that the next schedule takes it."""
        return tile_or_pass_over(lambda: tiling.tile(analyse(kernel), target, knobs), knobs)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        try:
            return tiling.choose(analyse(kernel), target, {})[1]
        except ScheduleError:
            return float("inf")

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        """Its own choice (at its default stages), then the cheapest others, of every stage count."""
        try:
            own = tiling.choose(analyse(kernel), target, {})
            others = tiling.ranked(analyse(kernel), target, {})
        except ScheduleError:
            return []
        return settings_of(self.name, [(own[1], own[0])] + [o for o in others if o[1] != own[0]], count)

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return lower_attention(tile, target)


class DecodeAttentionSchedule:
    """A few queries against many keys: the keys split over blocks, each range's softmax and
    output combined by the last block of its rows (flash-decoding), on the CUDA cores."""

    name = decode_tiling.SCHEDULE_NAME
    symbolic_sizes = True
    priority = 15
    knob_names = decode_tiling.KNOB_NAMES

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        if target.compute_capability < decode_tiling.MIN_ARCH:
            return False
        try:
            decode_recognise.analyse(kernel)
        except NotAttention:
            return False
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return tile_or_pass_over(lambda: decode_tiling.tile(decode_recognise.analyse(kernel), target, knobs), knobs)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        try:
            return decode_tiling.choose(decode_recognise.analyse(kernel), target, {})[1]
        except ScheduleError:
            return float("inf")

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        try:
            return settings_of(self.name, decode_tiling.ranked(decode_recognise.analyse(kernel), target, {}), count)
        except ScheduleError:
            return []

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return lower_decode_attention(tile, target)


class Float32AttentionSchedule:
    """A prompt's float32 attention in one pass over the keys, each product as three tf32
    products on ``mma.sync`` (FlashAttention-2's loop)."""

    name = float32_tiling.SCHEDULE_NAME
    priority = 15
    knob_names = float32_tiling.KNOB_NAMES

    def applies(self, kernel: loop_ir.Kernel, target: Target) -> bool:
        if target.compute_capability < float32_tiling.MIN_ARCH:
            return False
        try:
            float32_recognise.analyse(kernel)
        except NotAttention:
            return False
        return True

    def schedule(self, kernel: loop_ir.Kernel, target: Target, knobs: Mapping[str, Any]) -> tile_ir.TileKernel:
        return tile_or_pass_over(lambda: float32_tiling.tile(float32_recognise.analyse(kernel), target, knobs), knobs)

    def estimate_cost(self, kernel: loop_ir.Kernel, target: Target) -> float:
        try:
            return float32_tiling.choose(float32_recognise.analyse(kernel), target, {})[1]
        except ScheduleError:
            return float("inf")

    def best_settings(self, kernel: loop_ir.Kernel, target: Target, count: int) -> list[Setting]:
        try:
            return settings_of(self.name, float32_tiling.ranked(float32_recognise.analyse(kernel), target, {}), count)
        except ScheduleError:
            return []

    def lower(self, tile: tile_ir.TileKernel, target: Target) -> kernel_ir.Kernel:
        return lower_float32_attention(tile, target)


def settings_of(schedule: str, ranked: list[tuple[float, Any]], count: int) -> list[Setting]:
    """The first ``count`` of ``ranked`` (estimate, choice) as settings: a choice's fields are its knobs."""
    return [Setting(schedule, attrs.asdict(choice), estimate) for estimate, choice in ranked[:count]]


@hookimpl
def lamina_register_schedules(register):
    register(AttentionSchedule())
    register(DecodeAttentionSchedule())
    register(Float32AttentionSchedule())


@hookimpl
def lamina_register_fusion_rules(register):
    register(FuseAttention())
    register(FuseDecodeAttention())
    register(FuseFloat32Attention())

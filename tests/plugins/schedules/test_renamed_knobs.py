"""Old spellings of renamed knobs and schedules still work for one release, each with a
FutureWarning that names the new spelling."""

import pytest

from lamina.core.registry import Registry
from lamina.plugins.schedules.contraction import read_pinned
from lamina.plugins.schedules.matmul_row_reduction.plugin import MatmulRowReductionSchedule
from lamina.plugins.schedules.matmul_row_reduction.tiling import read_row_combine
from lamina.plugins.schedules.renamed_knobs import with_new_spellings
from lamina.plugins.schedules.row_reduction.tiling import RENAMED as ROW_REDUCTION_RENAMED


def test_tensor_cores_and_splits_are_read_as_products_and_in_block_k_splits():
    with pytest.warns(FutureWarning, match="knob tensor_cores is now products"):
        with pytest.warns(FutureWarning, match="knob splits is now in_block_k_splits"):
            pinned = read_pinned({"tensor_cores": 2, "splits": 1}, "here")
    assert pinned == {"splits": 1, "products": "wgmma"}
    assert read_pinned({"products": "mma_sync", "in_block_k_splits": 2}, "here") == {"splits": 2,
                                                                                    "products": "mma_sync"}


def test_the_new_spelling_wins_where_both_are_pinned():
    with pytest.warns(FutureWarning):
        assert read_pinned({"tensor_cores": 0, "products": "wgmma"}, "here") == {"products": "wgmma"}


def test_last_block_is_read_as_row_combine():
    with pytest.warns(FutureWarning, match="knob last_block is now row_combine"):
        assert read_row_combine({"last_block": 1}, "here") == "last_block"
    with pytest.warns(FutureWarning):
        assert read_row_combine({"last_block": 0}, "here") == "cluster"


def test_early_reads_is_read_as_prefetch_epilogue_reads():
    with pytest.warns(FutureWarning, match="knob early_reads is now prefetch_epilogue_reads"):
        assert with_new_spellings({"early_reads": True}, ROW_REDUCTION_RENAMED) == {"prefetch_epilogue_reads": True}


def test_the_schedule_contraction_rows_is_now_matmul_row_reduction():
    registry = Registry()
    schedule = MatmulRowReductionSchedule()
    registry.add("schedule", schedule.name, schedule, "builtin", schedule.priority)
    with pytest.warns(FutureWarning, match="'contraction_rows' is now 'matmul_row_reduction'"):
        assert registry.get("schedule", "contraction_rows").provider is schedule
    assert registry.get("schedule", "no_such_schedule") is None


def test_disabling_the_plugin_by_its_old_name_still_disables_it():
    from lamina.core.config import load_config
    from lamina.core.plugins import PluginManager

    with pytest.warns(FutureWarning, match="plugin lamina.builtin.schedules.contraction_rows is now"):
        manager = PluginManager(load_config(environ={}, disable=("lamina.builtin.schedules.contraction_rows",)),
                                entry_points=lambda: [])
    assert "matmul_row_reduction" not in manager.registry.names("schedule")


def test_the_new_spelling_pinned_for_a_split_contraction_warns_of_nothing():
    """Split-K's search hands the pins on to the contraction's estimate in the knobs' own
    spellings, not as the fields they are read into (``splits``, the old name)."""
    import warnings

    import torch

    import lamina

    x, w = torch.randn(64, 512), torch.randn(96, 512)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        f = lamina.compile(lambda x, w: x @ w.t(), (x, w), target="sm_90",
                           knobs={"contraction": {"in_block_k_splits": 1, "split_k": 2}})
    assert "split_k = 2" in f.ir("tile")

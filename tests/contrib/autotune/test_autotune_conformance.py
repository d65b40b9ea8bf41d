"""The autotune selection policy, checked by the conformance kit like any policy plugin.

With no tuning database it must behave as the cost model does. The suite compiles in an
empty temporary cache directory, so a database in the user's cache is never read.
"""

from pathlib import Path

from lamina.contrib.autotune import plugin as autotune
from lamina.contrib.autotune.policy import database_of
from lamina.core.config import user_cache_dir
from lamina.testing import SelectionPolicySuite
from lamina.testing.selection_suite import config_for


class TestAutotunePolicy(SelectionPolicySuite):
    plugin = autotune
    plugin_name = "lamina.contrib.autotune"


def test_the_policy_reads_an_empty_database_outside_the_users_cache():
    database = database_of(config_for(TestAutotunePolicy, "autotune")).path
    assert not database.exists()
    assert Path(user_cache_dir()) not in database.parents

"""A user's package registers tasks through the `complementary_rl.tasks` entry point: a distribution
is built in a temporary folder (package + `.dist-info`) and put on sys.path, no network."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.tasks.plugins import GROUP, specs_from
from crl.tasks.registry import get_task, list_tasks, make_env, refresh_plugins, task_origin, task_problems
from crl.tasks.user_task import UserTask
from tests.task_fixtures import clean_registry  # noqa: F401

PACKAGE = '''
from crl.tasks.base import SeedFolds, TaskSpec
from crl.tasks.user_task import UserTask


class Sorting(UserTask):
    """Sort three letters."""

    name = "mypkg/sort"
    max_steps = 3
    folds = SeedFolds(train=range(0, 50), dev=range(50, 60), test=range(60, 70))
    tools = ("mypkg:helper",)

    def reset(self, seed):
        self.letters = "cab" if seed % 2 else "bca"
        return self.observe(f"Sort the letters {self.letters}.", goal="Sort the letters.")

    def step(self, action):
        won = action.strip() == "".join(sorted(self.letters))
        return self.finish("Sorted." if won else "Not sorted.", success=won)


def helper(text: str) -> str:
    return "".join(sorted(text))


def more():
    return [TaskSpec("mypkg/echo", factory=Sorting, description="Another name for sorting.")]


CLASH = TaskSpec("keyroom/key", factory=Sorting, description="Tries to take a built-in name.")
'''

ENTRY_POINTS = f"""
[{GROUP}]
sort = mypkg:Sorting
more = mypkg:more
clash = mypkg:CLASH
broken = mypkg.missing:tasks
"""


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch, clean_registry):
    """`mypkg` 0.1 as an installed distribution with four task entry points (one broken)."""
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    info = tmp_path / "mypkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    refresh_plugins()
    yield tmp_path
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]
    refresh_plugins()


def test_get_task_finds_a_plugin_task_and_plays_it(installed_plugin):
    spec = get_task("mypkg/sort")
    assert spec.max_steps == 3 and spec.tools == ("mypkg:helper",) and spec.description == "Sort three letters."
    assert list(spec.folds.dev) == list(range(50, 60)) and task_origin("mypkg/sort") == "task plugin sort"
    env = make_env("mypkg/sort")
    obs = env.reset(1)
    assert obs.text == "Sort the letters cab." and obs.goal == "Sort the letters."
    wrong = env.step("cba")
    assert (wrong.reward, wrong.done, wrong.info["success"]) == (0.0, True, False)
    env.reset(1)
    right = env.step("abc")
    assert (right.reward, right.info["success"], right.observation.goal) == (1.0, True, "Sort the letters.")


def test_a_function_entry_point_may_return_several_specs(installed_plugin):
    assert get_task("mypkg/echo").description == "Another name for sorting."


def test_broken_and_clashing_plugins_are_reported_by_name(installed_plugin):
    names = {s.name for s in list_tasks()}
    assert {"mypkg/sort", "mypkg/echo", "keyroom/key"} <= names
    assert get_task("keyroom/key").description != "Tries to take a built-in name."
    problems = task_problems()
    broken = [p for p in problems if "'broken'" in p]
    assert broken and "mypkg.missing:tasks" in broken[0] and "package mypkg 0.1" in broken[0]
    assert "ModuleNotFoundError" in broken[0]
    assert any("task plugin clash offers keyroom/key, but that name is taken (built-in)" in p for p in problems)


def test_crl_tasks_lists_plugin_tasks_and_warns_about_the_broken_one(installed_plugin, crl_home):
    r = CliRunner().invoke(app, ["tasks", "mypkg", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"mypkg/sort", "mypkg/echo"}
    assert rows["mypkg/sort"]["source"] == "task plugin sort" and rows["mypkg/sort"]["sizes"] == "50/10/10"
    warnings = " ".join(r.stderr.split())
    assert "warning: task plugin 'broken'" in warnings and "fix or uninstall that package" in warnings


def test_unknown_task_error_mentions_the_failed_plugin(installed_plugin):
    with pytest.raises(ValueError, match="broken"):
        get_task("mypkg/missing")


def test_specs_from_refuses_what_is_not_a_task():
    with pytest.raises(TypeError, match="name a TaskSpec"):
        specs_from(42)
    with pytest.raises(TypeError, match="where a TaskSpec"):
        specs_from(lambda: [1])


def test_user_task_needs_a_family_variant_name():
    class Nameless(UserTask):
        pass

    with pytest.raises(Exception, match="family/variant"):
        Nameless.spec()

"""JSONL tasks: items validated with line numbers, deterministic disjoint folds, the env, and
registration through `crl tasks add` / `rm` that persists in the data directory."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.tasks.base import FOLDS, TaskError
from crl.tasks.checkers import CheckerSpec, item_validator
from crl.tasks.jsonl_items import hashed_fold, load_items
from crl.tasks.jsonl_tasks import JsonlEnv, default_name, jsonl_spec
from crl.tasks.registrations import add_registration, read_registrations, registrations_path
from crl.tasks.registry import fold_seeds, get_task, make_env, register, task_problems, use_user_tasks
from tests.task_fixtures import clean_registry, qa_items, write_items  # noqa: F401

NUMERIC = CheckerSpec(kind="numeric")


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_hashed_folds_are_stable_and_roughly_in_proportion():
    assert [hashed_fold(f"q{i}") for i in range(6)] == [hashed_fold(f"q{i}") for i in range(6)]
    folds = [hashed_fold(f"item-{i}") for i in range(3000)]
    shares = {f: folds.count(f) / len(folds) for f in FOLDS}
    assert 0.66 < shares["train"] < 0.74 and 0.12 < shares["dev"] < 0.18 and 0.12 < shares["test"] < 0.18


def test_split_field_wins_over_the_hash(tmp_path):
    rows = qa_items(20)
    for row in rows:
        row["split"] = "test"
    items = load_items(write_items(tmp_path / "a.jsonl", rows))
    assert len(items.folds["test"]) == 20 and not items.folds["train"] and not items.folds["dev"]


def test_fold_seeds_play_only_that_folds_items_and_folds_are_disjoint(tmp_path, clean_registry):
    spec = register(jsonl_spec("mult", write_items(tmp_path / "m.jsonl", qa_items(60)), NUMERIC))
    env = make_env("jsonl/mult")
    played = {}
    for fold in FOLDS:
        size = len(spec.folds.get(fold)) if fold != "train" else len(env.items.folds["train"])
        seeds = fold_seeds("jsonl/mult", fold, size)
        assert seeds == fold_seeds("jsonl/mult", fold, size)
        ids = []
        for seed in seeds:
            env.reset(seed)
            assert env.fold == fold and env.item.fold == fold
            ids.append(env.item.id)
        assert len(set(ids)) == size, "each seed of a fold's first pass plays a different item"
        played[fold] = set(ids)
    assert not (played["train"] & played["dev"]) and not (played["train"] & played["test"])
    assert not (played["dev"] & played["test"])
    assert set().union(*played.values()) == {f"q{i}" for i in range(60)}
    assert len(spec.folds.dev) == len(played["dev"]) and len(spec.folds.test) == len(played["test"])
    with pytest.raises(ValueError, match="has only"):
        fold_seeds("jsonl/mult", "dev", len(spec.folds.dev) + 1)


def test_train_seeds_wrap_around_the_train_items(tmp_path):
    env = JsonlEnv(write_items(tmp_path / "m.jsonl", qa_items(30)), "numeric")
    n_train = len(env.items.folds["train"])
    env.reset(3)
    first = env.item
    env.reset(3 + n_train)
    assert env.item == first
    with pytest.raises(TaskError, match="negative"):
        env.reset(-1)


def test_reset_shows_prompt_and_context_and_step_checks_the_final_answer(tmp_path):
    path = write_items(
        tmp_path / "geo.jsonl",
        [
            {
                "id": "fr",
                "prompt": "Capital of France?",
                "context": "It is on the Seine.",
                "answer": "Paris",
                "split": "dev",
            }
        ],
    )
    env = JsonlEnv(path, "normalised")
    assert env.name == "jsonl/geo"
    obs = env.reset(100_000)
    assert obs.text == "Capital of France?\n\nContext:\nIt is on the Seine."
    assert obs.goal == "Capital of France?" and obs.admissible_actions is None
    obs, reward, done, info = env.step("paris.")
    assert (reward, done, info["success"]) == (1.0, True, True)
    assert info["verdict"]["checker"] == "normalised" and info["verdict"]["expected"] == "Paris"
    assert info["item"] == "fr" and info["fold"] == "dev" and obs.text.startswith("Correct")
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("Paris")


def test_a_wrong_answer_fails(tmp_path):
    env = JsonlEnv(write_items(tmp_path / "m.jsonl", qa_items(10)), "numeric")
    env.reset(0)
    right = env.item.answer
    obs, reward, done, info = env.step(str(right + 1))
    assert (reward, done, info["success"]) == (0.0, True, False)
    assert info["verdict"]["got"] == right + 1 and info["verdict"]["expected"] == right
    assert obs.text.startswith("Incorrect") and str(right) not in obs.text, "a failure does not reveal the answer"


def test_bad_files_are_refused_with_line_numbers(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"prompt": "ok", "answer": 1}\n'
        "\n"
        '{"prompt": "typo", "anwser": 2}\n'
        "not json\n"
        '{"prompt": "ok", "answer": 3}\n'
        '{"prompt": "x", "answer": 1, "split": "validation"}\n'
        '{"prompt": "y", "answer": "abc"}\n'
    )
    with pytest.raises(TaskError) as caught:
        load_items(path, validate=item_validator(NUMERIC))
    message = str(caught.value)
    assert "5 bad line(s)" in message
    assert "line 3: missing field 'answer'; unknown field 'anwser'" in message
    assert "line 4: not JSON" in message
    assert "line 5: same prompt (give the items distinct `id`s) as line 1" in message
    assert "line 6: split:" in message
    assert "line 7: answer 'abc' is not a number" in message
    assert "line 1:" not in message and "line 2:" not in message


def test_missing_and_empty_files_say_what_to_do(tmp_path):
    with pytest.raises(TaskError, match="no items file"):
        jsonl_spec("x", tmp_path / "none.jsonl", NUMERIC)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(TaskError, match="holds no items"):
        load_items(tmp_path / "empty.jsonl")
    with pytest.raises(TaskError, match="bad task name"):
        jsonl_spec("Has Spaces", write_items(tmp_path / "m.jsonl", qa_items(3)), NUMERIC)


def test_a_fold_without_items_refuses_its_seeds(tmp_path):
    env = JsonlEnv(write_items(tmp_path / "t.jsonl", [{"prompt": "q", "answer": 1, "split": "train"}]), "numeric")
    with pytest.raises(TaskError, match="no test items"):
        env.reset(200_000)


def test_registration_persists_and_loads_through_the_registry(tmp_path, clean_registry):
    items = write_items(tmp_path / "m.jsonl", qa_items(20))
    file = registrations_path(tmp_path / "home")
    add_registration(file, "mult", items, NUMERIC, tools=("crl.tasks.checkers:normalise",), max_steps=4)
    stored = read_registrations(file)["mult"]
    assert stored.path == str(items.resolve()) and stored.max_steps == 4
    use_user_tasks(file)
    spec = get_task("jsonl/mult")
    assert spec.max_steps == 4 and spec.tools == ("crl.tasks.checkers:normalise",)
    with pytest.raises(TaskError, match="already added"):
        add_registration(file, "mult", items, NUMERIC)


def test_a_broken_registration_is_reported_not_fatal(tmp_path, clean_registry):
    items = write_items(tmp_path / "m.jsonl", qa_items(20))
    file = registrations_path(tmp_path / "home")
    add_registration(file, "mult", items, NUMERIC)
    add_registration(file, "other", write_items(tmp_path / "o.jsonl", qa_items(5)), NUMERIC)
    items.write_text('{"prompt": "broken"}\n')
    use_user_tasks(file)
    assert get_task("jsonl/other").name == "jsonl/other"
    problems = task_problems()
    assert len(problems) == 1 and "jsonl/mult" in problems[0] and "line 1: missing field 'answer'" in problems[0]
    with pytest.raises(ValueError, match="jsonl/mult cannot load"):
        get_task("jsonl/mult")


def test_cli_add_list_rm_round_trip(tmp_path, crl_home, clean_registry):
    items = write_items(tmp_path / "m.jsonl", qa_items(20))
    tool = tmp_path / "tools.py"
    tool.write_text("def double(x: int) -> int:\n    return 2 * x\n")
    r = invoke("tasks", "add", str(items), "--name", "mult", "--checker", "numeric", "--abs-tol", "0.5",
               "--tool", "tools.py:double", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    added = json.loads(r.stdout)
    assert added["name"] == "jsonl/mult" and added["tools"] == [f"{tool.resolve()}:double"]
    assert json.loads((crl_home / "tasks.json").read_text())["tasks"]["mult"]["checker"]["abs_tol"] == 0.5
    listed = {row["name"]: row for row in json.loads(invoke("tasks", "jsonl", "--json").stdout)}
    assert listed["jsonl/mult"]["source"] == "crl tasks add" and listed["jsonl/mult"]["max_steps"] == 6
    again = invoke("tasks", "add", str(items), "--name", "mult", "--checker", "exact")
    assert again.exit_code == 1 and "--replace" in again.stderr
    assert invoke("tasks", "rm", "jsonl/mult").exit_code == 0
    assert json.loads(invoke("tasks", "--json").stdout) and "jsonl/mult" not in invoke("tasks", "--json").stdout
    gone = invoke("tasks", "rm", "mult")
    assert gone.exit_code == 1 and "no added task jsonl/mult" in gone.stderr


def test_cli_add_refuses_a_bad_file_with_its_line_numbers(tmp_path, crl_home, clean_registry):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "a", "answer": "x"}\n{"prompt": "b", "answer": 2}\n')
    r = invoke("tasks", "add", str(path), "--checker", "numeric")
    assert r.exit_code == 1 and "line 1: answer 'x' is not a number" in r.stderr
    assert not (crl_home / "tasks.json").exists()


def test_unknown_jsonl_task_says_how_to_add_it(clean_registry):
    with pytest.raises(ValueError, match="crl tasks add FILE --name nothing"):
        get_task("jsonl/nothing")


def test_env_options_pass_the_runs_model_as_judge(tmp_path, clean_registry, monkeypatch):
    from crl.agent import judge as judge_module
    from crl.agent.app import env_options
    from crl.agent.config import load_settings
    from crl.agent.llm.scripted import ScriptedModel

    items = write_items(tmp_path / "j.jsonl", [{"prompt": "Capital of France?", "answer": "Paris", "split": "dev"}])
    register(jsonl_spec("judged", items, CheckerSpec(kind="llm-judge")))
    settings = load_settings({"home": str(tmp_path / "home"), "llm": {"backend": "openai", "model": "judge-7b"}})
    model = ScriptedModel(["**YES**"])
    monkeypatch.setattr(judge_module, "_shared_model", lambda s: model)
    options = env_options(settings, "jsonl/judged")
    assert options["judge_model"] == "judge-7b" and not model.calls, "the judge model is used only when needed"
    env = make_env("jsonl/judged", **options)
    env.reset(100_000)
    info = env.step("It is Paris.").info
    assert (
        info["success"] and info["verdict"]["judge_model"] == "judge-7b" and info["verdict"]["judge_text"] == "**YES**"
    )
    assert "It is Paris." in model.calls[0].batch[0][0]["content"]
    assert "judge" not in env_options(settings, "keyroom/key")
    with pytest.raises(TaskError, match="needs a judging model"):
        make_env("jsonl/judged")


def test_every_command_finds_added_tasks_through_the_settings(tmp_path, crl_home, clean_registry):
    from crl.agent.cli.common import effective_settings

    add_registration(registrations_path(crl_home), "mult", write_items(tmp_path / "m.jsonl", qa_items(9)), NUMERIC)
    use_user_tasks(None)
    with pytest.raises(ValueError, match="unknown task"):
        get_task("jsonl/mult")
    effective_settings()
    assert get_task("jsonl/mult").name == "jsonl/mult"


def test_a_file_without_a_name_is_named_after_its_stem(tmp_path, crl_home, clean_registry):
    assert default_name("data/My Questions.jsonl") == "my-questions"
    items = write_items(tmp_path / "Times Table.jsonl", qa_items(9))
    r = invoke("tasks", "add", str(items), "--checker", "numeric", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["name"] == "jsonl/times-table" and get_task("jsonl/times-table").max_steps == 6


def test_the_python_api_plays_an_added_task_with_its_tool(tmp_path, clean_registry):
    import crl
    from crl.agent.llm.scripted import ScriptedModel

    home = tmp_path / "home"
    same = [{"id": f"q{i}", "prompt": "What is 6 times 7?", "answer": 42} for i in range(9)]
    tools = ("examples/arithmetic/tools.py:calculator",)
    add_registration(registrations_path(home), "mult", write_items(tmp_path / "m.jsonl", same), NUMERIC, tools=tools)
    use_user_tasks(None)  # as a fresh process: nothing but crl.run points the registry at the file
    cfg = crl.settings(home=home, memory={"enabled": False}, agent={"memory": "off", "policy": "llm"})
    model = ScriptedModel([' calculator {"expression": "6*7"}', ' final_answer {"answer": "42"}'])
    [episode] = crl.run("jsonl/mult", episodes=1, settings=cfg, model=model).episodes
    assert [s.action for s in episode.steps] == ['calculator {"expression": "6*7"}', 'final_answer {"answer": "42"}']
    assert episode.steps[1].observation == "42" and episode.success

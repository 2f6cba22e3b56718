"""The section-5 experiment (`crl experiment skills`): its report arithmetic, and a tiny real run."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.skills_experiment import SkillsSpec, stages, subtasks_of
from crl.agent.skills_report import final_pairs, report_lines, step_ratio, summarise, with_adapter_alone


def point(stage: str, steps: int, outcomes: list[bool]) -> dict:
    return {
        "stage": stage,
        "env_steps": steps,
        "successes": sum(outcomes),
        "episodes": len(outcomes),
        "outcomes": {str(100000 + i): o for i, o in enumerate(outcomes)},
        "fold": "dev",
        "detail": {},
    }


def results() -> dict:
    spec = SkillsSpec(repeats=2, eval_episodes=4, drrn_steps=4000, drrn_eval_every=2000)
    drrn = [
        {
            "arm": "drrn",
            "repeat": r,
            "points": [
                point("drrn", 0, [False] * 4),
                point("drrn", 2000, [True, False, False, False]),
                point("drrn", 4000, [True, True, False, False]),
            ],
            "test": None,
            "seconds": 1,
            "done": True,
        }
        for r in range(2)
    ]
    none = [
        {
            "arm": "none",
            "repeat": 0,
            "points": [point("model alone", 0, [False] * 4)],
            "test": None,
            "seconds": 1,
            "done": True,
        }
    ]
    skills = [
        {
            "arm": "skills",
            "repeat": r,
            "points": [
                point("phase 1 + synthesis", 100 + r * 20, [True, False, False, False]),
                point("compound training", 300 + r * 20, [True, True, True, False]),
            ],
            "test": None,
            "seconds": 1,
            "done": True,
        }
        for r in range(2)
    ]
    return {"spec": json.loads(json.dumps(spec.__dict__)), "runs": drrn + none + skills}


def test_summary_pools_repeats_and_averages_env_steps():
    rows = summarise(results())
    skills = [r for r in rows if r["arm"] == "skills"]
    assert [r["env_steps"] for r in skills] == [110, 310]
    assert [(r["successes"], r["episodes"]) for r in skills] == [(2, 8), (6, 8)]
    assert skills[1]["per_repeat"] == [0.75, 0.75]
    assert 0 < skills[1]["ci95"][0] < 0.75 < skills[1]["ci95"][1] <= 1


def test_step_ratio_is_steps_to_reach_the_baselines_final_over_the_baselines():
    ratio = step_ratio(summarise(results()), "skills")
    assert ratio["target"] == 0.5 and ratio["baseline_steps"] == 4000
    assert ratio["arm_steps"] == 310 and ratio["ratio"] == pytest.approx(310 / 4000)
    never = step_ratio(summarise(results()), "none")
    assert never["arm_steps"] is None and never["ratio"] is None
    assert step_ratio(summarise(results()), "skills+sft") is None


def test_final_points_pair_by_repeat_and_seed_and_a_single_run_stands_for_all():
    pairs = {(p["arm_a"], p["arm_b"]): p for p in final_pairs(results())}
    versus = pairs[("drrn", "skills")]
    assert versus["pairs"] == 8 and (versus["a"], versus["b"]) == (4, 6)
    assert (versus["a_only"], versus["b_only"]) == (0, 2)
    alone = pairs[("none", "skills")]
    assert alone["pairs"] == 8 and alone["b_only"] == 6 and alone["mcnemar_p"] < 0.05


def test_only_the_model_alone_stands_for_every_repeat_in_the_paired_tests():
    data = results()
    data["runs"].append(
        {
            "arm": "skills+sft",
            "repeat": 0,
            "points": [point("sft", 500, [True, True, True, True])],
            "test": None,
            "seconds": 1,
            "done": True,
        }
    )
    pairs = {(p["arm_a"], p["arm_b"]): p for p in final_pairs(data)}
    assert pairs[("drrn", "skills+sft")]["pairs"] == 4  # one repeat played: paired on it alone
    assert pairs[("none", "skills+sft")]["pairs"] == 4
    assert pairs[("drrn", "none")]["pairs"] == 8  # the model alone, played once, stands for both


def test_report_has_the_table_the_ratio_and_the_tests():
    text = "\n".join(report_lines(results()))
    assert "| skills | compound training | 310 | 6/8 (75%)" in text
    assert "| skills | 50% | 4000 | 310 | 0.077 |" in text
    assert "McNemar" in text


def test_the_adapter_alone_is_reported_as_its_own_arm_paired_with_the_adapter_with_memory():
    data = results()
    alone = point("sft, adapter alone", 310, [True, False, False, False])
    data["runs"].append(
        {
            "arm": "skills+sft",
            "repeat": 0,
            "points": [point("sft", 310, [True, True, True, True]) | {"detail": {"adapter_alone": alone}}],
            "test": None,
            "seconds": 1,
            "done": True,
        }
    )
    text = "\n".join(report_lines(data))
    assert "| sft alone | sft, adapter alone | 310 | 1/4 (25%)" in text
    assert with_adapter_alone(with_adapter_alone(data)) == with_adapter_alone(data)
    pairs = {(p["arm_a"], p["arm_b"]): p for p in final_pairs(with_adapter_alone(data))}
    versus = pairs[("skills+sft", "sft alone")]
    assert versus["pairs"] == 4 and (versus["a_only"], versus["b_only"]) == (3, 0)


def test_every_sft_round_reports_the_adapter_alone_and_the_last_round_is_paired():
    data = results()
    rounds = [
        point("sft", 310, [True, True, False, False])
        | {"detail": {"adapter_alone": point("sft, adapter alone", 310, [True, False, False, False])}},
        point("sft round 2", 330, [True, True, True, True])
        | {"detail": {"adapter_alone": point("sft round 2, adapter alone", 330, [True, True, True, False])}},
    ]
    data["runs"].append({"arm": "skills+sft", "repeat": 0, "points": rounds, "test": None, "seconds": 1, "done": True})
    alone = next(r for r in with_adapter_alone(data)["runs"] if r["arm"] == "sft alone")
    assert [p["stage"] for p in alone["points"]] == ["sft, adapter alone", "sft round 2, adapter alone"]
    text = "\n".join(report_lines(data))
    assert "| sft alone | sft round 2, adapter alone | 330 | 3/4 (75%)" in text
    assert "| skills+sft | sft round 2 | 330 | 4/4 (100%)" in text
    versus = {(p["arm_a"], p["arm_b"]): p for p in final_pairs(with_adapter_alone(data))}[("skills+sft", "sft alone")]
    assert (versus["a"], versus["b"]) == (4, 3)


def test_spec_and_task_checks():
    with pytest.raises(ValueError, match="unknown arm"):
        SkillsSpec(arms=["ppo"])
    with pytest.raises(ValueError, match="no arms"):
        SkillsSpec(arms=[])
    with pytest.raises(ValueError, match="sft_rounds"):
        SkillsSpec(sft_rounds=0)
    assert stages(SkillsSpec(sft_rounds=3), "skills+sft") == 3
    with pytest.raises(ValueError, match="continues the skills arm"):
        SkillsSpec(arms=["skills+sft"])
    with pytest.raises(ValueError, match="no sub-goal order of its own"):
        subtasks_of("keyroom/key")
    assert subtasks_of("keyroom/compound?n_rooms=3") == [
        "keyroom/key?n_rooms=3",
        "keyroom/door?n_rooms=3",
        "keyroom/chest?n_rooms=3",
    ]
    assert stages(SkillsSpec(drrn_steps=5000, drrn_eval_every=2000), "drrn") == 4  # 0, 2000, 4000, 5000


@pytest.mark.slow
def test_a_tiny_real_run_of_every_arm_writes_the_plot_table_and_results(tmp_path, crl_home, monkeypatch):
    monkeypatch.setenv("CRL_LLM__DTYPE", "bf16")
    monkeypatch.setenv("CRL_FINETUNE__BATCH_SIZE", "1")  # the one SFT step on one example, not 4 x 2
    monkeypatch.setenv("CRL_FINETUNE__GRADIENT_ACCUMULATION", "1")
    out = tmp_path / "skills"
    args = [
        "experiment", "skills", "keyroom/compound", "--phase1", "1", "--budget", "1", "--eval-episodes", "1",
        "--test-episodes", "1", "--repeats", "1", "--drrn-steps", "60", "--drrn-eval-every", "30",
        "--sft-epochs", "1", "--sft-max-steps", "1", "--sft-rounds", "2", "--max-steps", "3", "--out", str(out),
        "--json",
    ]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert (out / "curve.png").stat().st_size > 0
    table = (out / "table.md").read_text()
    data = json.loads((out / "results.json").read_text())
    runs = {run["arm"]: run for run in data["runs"]}
    assert set(runs) == {"drrn", "none", "skills", "skills+sft"} and all(r["done"] for r in runs.values())
    assert [p["env_steps"] for p in runs["drrn"]["points"]] == [0, 30, 60]
    first, second = runs["skills"]["points"]
    assert first["detail"]["phase1_steps"] > 0 and first["env_steps"] >= first["detail"]["phase1_steps"]
    assert second["env_steps"] > first["env_steps"] and second["detail"]["train_steps"] > 0
    sft1, sft2 = runs["skills+sft"]["points"]
    assert sft1["detail"]["adapter"] != sft2["detail"]["adapter"]
    assert sft1["env_steps"] == second["env_steps"] and sft1["detail"]["adapter_alone"]["episodes"] == 1
    (collected,) = sft2["detail"]["sft_rounds"]
    assert collected["round"] == 2 and collected["train_steps"] > 0
    assert sft2["env_steps"] == sft1["env_steps"] + collected["train_steps"] + collected["replay_steps"]
    assert sft2["stage"] == "sft round 2" and runs["skills+sft"]["test"]["stage"] == "sft round 2"
    assert all(run["test"]["fold"] == "test" for run in runs.values())
    assert "| skills+sft | sft |" in table and "| skills+sft | sft round 2 |" in table and "test fold" in table
    assert "| sft alone | sft, adapter alone |" in table and "| sft alone | sft round 2, adapter alone |" in table
    again = CliRunner().invoke(app, args)  # finished: nothing is played again
    assert again.exit_code == 0, again.output
    assert json.loads((out / "results.json").read_text())["runs"] == data["runs"]


class FakeRun:
    """What `eval_point`, `steps_of` and `replay_steps_of` read from a run, for `n` two-step episodes."""

    def __init__(self, wins: list[bool]) -> None:
        from types import SimpleNamespace as NS

        self.episodes = [NS(finished=True, seed=i, success=w, subgoals={}, steps=[0, 0]) for i, w in enumerate(wins)]
        self.info = NS(run_id="r", synthesis={"replay_env_steps": 1})

    def report(self) -> dict:
        return {"successes": sum(e.success for e in self.episodes), "episodes": len(self.episodes), "decided_by": {}}


def test_an_interrupted_sft_round_resumes_after_the_last_finished_one_from_its_snapshot(tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    import crl.agent.finetuning as finetuning
    from crl.agent.skills_experiment import SkillsExperiment, SkillsPoint, SkillsRun

    spec = SkillsSpec(arms=["skills", "skills+sft"], repeats=1, sft_rounds=3, eval_episodes=2, test_episodes=0)
    exp = SkillsExperiment(spec, tmp_path)
    exp.runs = [SkillsRun("skills", 0, [SkillsPoint("compound training", 100, 1, 2)], done=True)]
    exp.save()
    exp.home("skills", 0).mkdir(parents=True)
    (exp.home("skills", 0) / "bank").write_text("skills\n")
    trained: list[int] = []
    crash = {"at": 2}

    def sft_round(self, ctx, settings, detail, parent=None):
        home = self.home("skills+sft", 0)
        n = len((home / "bank").read_text().splitlines())
        if n == crash["at"]:
            raise RuntimeError("killed mid-round")
        trained.append(n)
        return home / f"adapter-{n}", detail | {"adapter": f"a{n}"}

    def collect(self, settings, adapter, repeat, round_no):
        with open(self.home("skills+sft", 0) / "bank", "a") as f:
            f.write(f"collected {round_no}\n")
        return FakeRun([True, False])

    monkeypatch.setattr(SkillsExperiment, "_sft_round", sft_round)
    monkeypatch.setattr(SkillsExperiment, "_collect_with_adapter", collect)
    monkeypatch.setattr(finetuning, "evaluate_adapter", lambda *a, **k: FakeRun([True, True]))
    registry = NS(adapter_dir=lambda i: tmp_path / i)
    monkeypatch.setattr(finetuning, "finetune_context", lambda *a, **k: NS(registry=registry))
    monkeypatch.setattr("crl.agent.skills_report.write_report", lambda *a: None)

    with pytest.raises(RuntimeError, match="killed"):
        SkillsExperiment(spec, tmp_path).run()
    saved = json.loads((tmp_path / "results.json").read_text())["runs"][1]
    assert saved["arm"] == "skills+sft" and not saved["done"] and len(saved["points"]) == 1
    assert SkillsExperiment(spec, tmp_path).kept_points() == 2  # the skills point and round 1, from its snapshot
    assert SkillsExperiment(SkillsSpec(arms=["skills"], repeats=1), tmp_path).kept_points() == 0  # another spec
    crash["at"] = None
    SkillsExperiment(spec, tmp_path).run()
    (run,) = [r for r in json.loads((tmp_path / "results.json").read_text())["runs"] if r["arm"] == "skills+sft"]
    assert run["done"] and [p["stage"] for p in run["points"]] == ["sft", "sft round 2", "sft round 3"]
    assert trained == [1, 2, 3]  # round 1 trained once; the crashed round's collection was undone
    assert (exp.home("skills+sft", 0) / "bank").read_text() == "skills\ncollected 2\ncollected 3\n"
    assert [p["env_steps"] for p in run["points"]] == [100, 105, 110]  # 4 steps + 1 replay step per round
    assert [r["round"] for r in run["points"][-1]["detail"]["sft_rounds"]] == [2, 3]
    assert not list(tmp_path.glob("skills-sft/repeat-0-after-*"))
    assert SkillsExperiment(spec, tmp_path).kept_points() == 4


def test_align_has_each_new_adapter_play_with_memory_before_its_evaluation_with_memory(tmp_path, monkeypatch):
    """`--align N`: after the adapter-alone evaluation, the adapter plays N training episodes with memory
    on train worlds no other stage plays, charged to the arm; then it is judged with memory."""
    from types import SimpleNamespace as NS

    import crl.agent.finetuning as finetuning
    from crl.agent.skills_experiment import SkillsExperiment, SkillsPoint, SkillsRun

    spec = SkillsSpec(
        arms=["skills", "skills+sft"], repeats=1, sft_rounds=2, budget=2, align=3, eval_episodes=2, test_episodes=0
    )
    exp = SkillsExperiment(spec, tmp_path)
    exp.runs = [SkillsRun("skills", 0, [SkillsPoint("compound training", 100, 1, 2)], done=True)]
    exp.save()
    exp.home("skills", 0).mkdir(parents=True)
    calls: list[tuple] = []

    def play(settings, task, episodes, adapter, **run_args):
        calls.append(("play", episodes, run_args["seed_start"]))
        return FakeRun([True, False, True][:episodes])

    def evaluate(settings, task, episodes, adapter, memory, **kw):
        calls.append(("eval", "memory" if memory else "alone"))
        return FakeRun([True, True])

    monkeypatch.setattr(
        SkillsExperiment, "_sft_round", lambda self, ctx, s, d, parent=None: (tmp_path / "a", d | {"adapter": "a"})
    )
    monkeypatch.setattr(finetuning, "play_with_adapter", play)
    monkeypatch.setattr(finetuning, "evaluate_adapter", evaluate)
    monkeypatch.setattr(finetuning, "finetune_context", lambda *a, **k: NS(registry=NS(adapter_dir=lambda i: tmp_path)))
    monkeypatch.setattr("crl.agent.skills_report.write_report", lambda *a: None)
    SkillsExperiment(spec, tmp_path).run()
    # round 1: alone, align, with memory; round 2: collect (budget 2), alone, align, with memory
    assert [c[0] for c in calls] == ["eval", "play", "eval", "play", "eval", "play", "eval"]
    assert [c[1] for c in calls if c[0] == "eval"] == ["alone", "memory"] * 2
    aligns = [c for c in calls if c[0] == "play" and c[1] == 3]
    collect = [c for c in calls if c[0] == "play" and c[1] == 2]
    seeds = [set(range(c[2], c[2] + c[1])) for c in aligns + collect]
    assert len(aligns) == 2 and len(collect) == 1 and not set.intersection(*seeds[:2]) and not seeds[2] & seeds[0]
    assert min(min(s) for s in seeds) >= spec.phase1 + spec.budget  # after phase 1 and compound training worlds
    (run,) = [r for r in json.loads((tmp_path / "results.json").read_text())["runs"] if r["arm"] == "skills+sft"]
    first, second = run["points"]
    assert first["detail"]["aligned"] == {"episodes": 3, "train_steps": 6, "replay_steps": 1, "train_successes": 2}
    assert first["env_steps"] == 100 + 7 and second["env_steps"] == first["env_steps"] + 5 + 7
    with pytest.raises(ValueError, match="align"):
        SkillsSpec(align=-1)


def test_continued_rounds_train_the_last_adapter_on_the_compound_tasks_wins(tmp_path, monkeypatch):
    """`--continue-rounds`: round 1 trains from the base on every sub-task; each later round first plays
    `--collect` episodes, then continues the last adapter for `--round-steps` steps on the compound task's
    wins (the demonstration filter is the settings'); `--collect` moves the aligning worlds past the collected ones."""
    from types import SimpleNamespace as NS

    import crl.agent.finetuning as finetuning
    import crl.finetune.rounds as rounds
    from crl.agent.skills_experiment import SkillsExperiment, SkillsPoint, SkillsRun
    from crl.finetune.config import FinetuneConfig
    from crl.finetune.dataset_card import CARD_FILE

    spec = SkillsSpec(
        arms=["skills", "skills+sft"], repeats=1, sft_rounds=3, budget=2, collect=5, align=1,
        continue_rounds=True, round_steps=7, eval_episodes=2, test_episodes=0,
    )  # fmt: skip
    exp = SkillsExperiment(spec, tmp_path)
    exp.runs = [SkillsRun("skills", 0, [SkillsPoint("compound training", 100, 1, 2)], done=True)]
    exp.save()
    exp.home("skills", 0).mkdir(parents=True)
    built, trained, played = [], [], []

    def make_dataset(ctx, kind, tasks=None, **kw):
        built.append((tasks, ctx.config.sft_minimal, ctx.config.max_steps))
        folder = tmp_path / f"ds{len(built)}"
        folder.mkdir()
        (folder / CARD_FILE).write_text(json.dumps({"examples": 9, "dropped": {"unneeded": len(built)}}))
        return folder

    def train(ctx, kind, folder, from_adapter=None):
        trained.append(from_adapter)
        return None, NS(id=f"a{len(trained)}", metrics={"wall_seconds": 1.0})

    def play(settings, task, episodes, adapter, **run_args):
        played.append((episodes, run_args["seed_start"]))
        return FakeRun([True] * episodes)

    config = FinetuneConfig()
    ctx = rounds.FinetuneContext(tmp_path, config, "base", tmp_path, progress=False)
    monkeypatch.setattr(rounds, "make_dataset", make_dataset)
    monkeypatch.setattr(rounds, "train_and_register", train)
    monkeypatch.setattr(finetuning, "finetune_context", lambda *a, **k: ctx)
    monkeypatch.setattr(finetuning, "play_with_adapter", play)
    monkeypatch.setattr(finetuning, "evaluate_adapter", lambda *a, **k: FakeRun([True, True]))
    monkeypatch.setattr("crl.agent.skills_report.write_report", lambda *a: None)
    SkillsExperiment(spec, tmp_path).run()
    subtasks = ["keyroom/key", "keyroom/door", "keyroom/chest"]
    assert built == [
        ([*subtasks, "keyroom/compound"], False, -1),
        (["keyroom/compound"], False, 7),
        (["keyroom/compound"], False, 7),
    ]
    assert trained == [None, "a1", "a2"] and config.max_steps == -1  # the shared config is left as it was
    collected = [p for p in played if p[0] == 5]
    aligned = [p for p in played if p[0] == 1]
    assert len(collected) == 2 and len(aligned) == 3
    collect_seeds = {s for n, start in collected for s in range(start, start + n)}
    assert len(collect_seeds) == 10 and not collect_seeds & {start for _, start in aligned}
    (run,) = [r for r in json.loads((tmp_path / "results.json").read_text())["runs"] if r["arm"] == "skills+sft"]
    last = run["points"][-1]["detail"]
    assert last["adapter"] == "a3" and last["parent_adapter"] == "a2" and last["sft_unneeded"] == 3
    with pytest.raises(ValueError, match="collect"):
        SkillsSpec(collect=-1)
    with pytest.raises(ValueError, match="round_steps"):
        SkillsSpec(round_steps=0)


def scripted_arms(monkeypatch, names: tuple[str, ...]) -> list[tuple[str, int]]:
    """Replace the named arms with one point each; the (arm, repeat)s they play, in order."""
    from crl.agent.skills_experiment import SkillsExperiment, SkillsPoint

    played: list[tuple[str, int]] = []

    def arm(name):
        def play(self, run, repeat):
            played.append((name, repeat))
            self.add(run, SkillsPoint(name, 10 * (repeat + 1), 1, 2), 0.0)

        return play

    for name in names:
        monkeypatch.setattr(SkillsExperiment, "_" + name, arm(name))
    monkeypatch.setattr("crl.agent.skills_report.write_report", lambda *a: None)
    return played


def test_running_again_with_more_repeats_or_arms_extends_the_experiment_and_keeps_what_it_played(tmp_path, monkeypatch):
    from crl.agent.skills_experiment import SkillsExperiment

    played = scripted_arms(monkeypatch, ("none", "skills", "drrn"))
    small = dict(eval_episodes=2, test_episodes=0, phase1=4)

    SkillsExperiment(SkillsSpec(arms=["none", "skills"], repeats=1, **small), tmp_path).run()
    more = SkillsSpec(arms=["none", "skills"], repeats=3, **small)
    assert SkillsExperiment(more, tmp_path).kept_points() == 2
    SkillsExperiment(more, tmp_path).run()
    assert played == [("none", 0), ("skills", 0), ("skills", 1), ("skills", 2)]  # the model alone is deterministic

    played.clear()
    data = SkillsExperiment(SkillsSpec(arms=["drrn"], repeats=1, **small), tmp_path).run()
    assert played == [("drrn", 0)]
    assert data["spec"]["arms"] == ["drrn", "none", "skills"] and data["spec"]["repeats"] == 3
    assert sorted((r["arm"], r["repeat"]) for r in data["runs"]) == [
        ("drrn", 0),
        ("none", 0),
        ("skills", 0),
        ("skills", 1),
        ("skills", 2),
    ]
    assert SkillsExperiment(SkillsSpec(arms=["skills"], repeats=1, **small), tmp_path).kept_points() == 1

    with pytest.raises(ValueError, match="phase1 4, here 8"):
        SkillsExperiment(SkillsSpec(arms=["skills"], repeats=1, eval_episodes=2, test_episodes=0), tmp_path).run()


def test_processes_playing_different_arms_in_one_folder_keep_each_others_points(tmp_path, monkeypatch):
    from crl.agent.skills_experiment import SkillsExperiment, SkillsPoint

    small = dict(eval_episodes=2, test_episodes=0, phase1=4, repeats=1)
    other = SkillsExperiment(SkillsSpec(arms=["drrn"], **small), tmp_path)

    def skills(self, run, repeat):
        self.add(run, SkillsPoint("phase 1", 10, 1, 2), 0.0)
        other.run()  # another process plays the DRRN into the same folder meanwhile
        self.add(run, SkillsPoint("compound", 20, 2, 2), 0.0)

    def drrn(self, run, repeat):
        self.add(run, SkillsPoint("drrn", 0, 0, 2), 0.0)

    monkeypatch.setattr(SkillsExperiment, "_skills", skills)
    monkeypatch.setattr(SkillsExperiment, "_drrn", drrn)
    monkeypatch.setattr("crl.agent.skills_report.write_report", lambda *a: None)

    data = SkillsExperiment(SkillsSpec(arms=["skills"], **small), tmp_path).run()
    runs = {(r["arm"], r["repeat"]): r for r in data["runs"]}
    assert set(runs) == {("skills", 0), ("drrn", 0)}
    assert [p["stage"] for p in runs["skills", 0]["points"]] == ["phase 1", "compound"]
    assert runs["drrn", 0]["done"] and [p["stage"] for p in runs["drrn", 0]["points"]] == ["drrn"]
    assert data["spec"]["arms"] == ["drrn", "skills"]


def test_repeats_played_in_separate_folders_from_a_first_repeat_merge_into_the_whole_experiment(tmp_path, monkeypatch):
    from crl.agent.skills_experiment import SkillsExperiment, merge_results

    played = scripted_arms(monkeypatch, ("none", "skills"))
    spec = SkillsSpec(arms=["none", "skills"], repeats=3, eval_episodes=2, test_episodes=0, phase1=4)

    later = SkillsExperiment(spec, tmp_path / "later", first_repeat=1).run()
    assert played == [("skills", 1), ("skills", 2)]  # the model alone's one run is repeat 0's
    first = SkillsExperiment(spec, tmp_path / "first").run()
    assert played[2:] == [("none", 0), ("skills", 0), ("skills", 1), ("skills", 2)]
    assert SkillsExperiment(spec, tmp_path / "later", first_repeat=1).kept_points() == 2
    assert SkillsExperiment(spec, tmp_path / "first", first_repeat=2).kept_points() == 1

    part = dict(first, runs=[r for r in first["runs"] if r["repeat"] == 0])
    merged = merge_results([("first", part), ("later", later)])
    assert sorted((r["arm"], r["repeat"]) for r in merged["runs"]) == [
        ("none", 0),
        ("skills", 0),
        ("skills", 1),
        ("skills", 2),
    ]
    with pytest.raises(ValueError, match="from 0 to 2"):
        SkillsExperiment(spec, tmp_path, first_repeat=3)


def test_results_played_in_separate_folders_merge_into_one_report(tmp_path):
    from crl.agent.skills_experiment import merge_results

    whole = results()
    drrn = dict(whole, runs=[r for r in whole["runs"] if r["arm"] == "drrn"])
    rest = dict(whole, runs=[r for r in whole["runs"] if r["arm"] != "drrn"])
    for name, part in (("a", drrn), ("b", rest)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(part))

    merged = merge_results([("a", drrn), ("b", rest)])
    assert sorted((r["arm"], r["repeat"]) for r in merged["runs"]) == sorted(
        (r["arm"], r["repeat"]) for r in whole["runs"]
    )
    with pytest.raises(ValueError, match="drrn repeat 0 is in both a and again"):
        merge_results([("a", drrn), ("again", drrn)])
    elsewhere = dict(rest, spec=dict(rest["spec"], eval_episodes=8))
    with pytest.raises(ValueError, match="eval_episodes 4, here 8"):
        merge_results([("a", drrn), ("b", elsewhere)])
    with pytest.raises(ValueError, match="not a `crl experiment skills` result"):
        merge_results([("curve", {"spec": {"task": "keyroom/key"}, "runs": []})])

    out = tmp_path / "b"
    res = CliRunner().invoke(
        app, ["experiment", "report", str(tmp_path / "a"), str(out), "--merge-into", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert {r["arm"] for r in rows} == {"drrn", "none", "skills"}
    saved = json.loads((out / "results.json").read_text())
    assert len(saved["runs"]) == len(whole["runs"])
    assert "steps" in (out / "table.md").read_text() and (out / "curve.png").is_file()

    refused = CliRunner().invoke(app, ["experiment", "report", str(tmp_path / "a"), "--merge-into", str(out)])
    assert refused.exit_code != 0 and "not among the results merged" in refused.output


def test_phase1_retries_play_only_the_worlds_no_attempt_solved_and_charge_their_steps(tmp_path, monkeypatch):
    """`--phase1-retries N`: each sub-task's unsolved phase-1 worlds are played again, up to N more
    times, stopping once every world is solved; every step is charged to phase 1."""
    from types import SimpleNamespace as NS

    import crl.agent.app as app_module
    from crl.agent.skills_experiment import SkillsExperiment
    from crl.agent.skills_report import phase1_text
    from crl.tasks.registry import fold_seeds

    played: list[tuple[str, list[int]]] = []
    wins = {("keyroom/door", 1): {1}, ("keyroom/door", 2): {0}, ("keyroom/chest", 2): {2}}

    def start_run(settings, task, episodes, seeds=None, model=None, **_):
        attempt = sum(t == task for t, _ in played) + 1
        played.append((task, list(seeds)))
        won = wins.get((task, attempt), {0, 1, 2} if task == "keyroom/key" else set())
        episodes = [NS(seed=s, success=s % 3 in won, steps=[0] * 5) for s in seeds]
        return NS(episodes=episodes, info=NS(synthesis={"replay_env_steps": 2}))

    monkeypatch.setattr(app_module, "start_run", start_run)
    spec = SkillsSpec(arms=["skills"], phase1=3, repeats=2, retries=2)
    steps, replay, plays = SkillsExperiment(spec, tmp_path)._phase1(NS(), 1, model=None)
    door = fold_seeds("keyroom/door", "train", 3, 3)
    assert [(t, len(s)) for t, s in played] == [
        ("keyroom/key", 3),  # all solved: no retry
        ("keyroom/door", 3),
        ("keyroom/door", 2),  # worlds 0 and 2
        ("keyroom/door", 1),  # world 2
        ("keyroom/chest", 3),
        ("keyroom/chest", 3),
        ("keyroom/chest", 2),  # retries stop at 2 more plays, world 2 solved on the second
    ]
    assert played[3][1] == [door[2]]
    assert steps == 5 * sum(len(s) for _, s in played) and replay == 2 * len(played)
    assert [p["won"] for p in plays if p["task"] == "keyroom/door"] == [1, 1, 0]
    assert "played again up to 2 more times" in phase1_text(spec.__dict__)
    played.clear()
    SkillsExperiment(SkillsSpec(phase1=3), tmp_path)._phase1(NS(), 0, None)
    assert [t for t, _ in played] == ["keyroom/key", "keyroom/door", "keyroom/chest"]  # no retries by default
    with pytest.raises(ValueError, match="retries"):
        SkillsSpec(retries=-1)

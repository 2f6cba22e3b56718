"""Episodic control: action values from stored neighbours, the mixed and memory policies."""

from __future__ import annotations

import random

import numpy as np
import pytest

from crl.memory.ingest import EpisodeTags, build_records
from crl.memory.retrieval.analogous_values import FrameSteps, analogue_return
from crl.memory.retrieval.analogy import PhraseSimilarity, action_frame
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import (
    ActionValue,
    action_values,
    choose_memory,
    choose_mixed,
    memory_advantages,
    merge_analogous,
    normalise_action,
    step_return,
    vote_weight,
)
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from tests.retrieval_fixtures import GOAL, HALL, bank, episode, no_default_embedding, step_record  # noqa: F401

CFG = RetrievalConfig()


def _votes(*specs):
    """(action, outcome, steps_to_end, similarity, extra fields) -> neighbours."""
    out = []
    for n, (action, outcome, to_end, sim, *extra) in enumerate(specs):
        fields = extra[0] if extra else {}
        out.append((step_record(f"e{n}", 0, action, outcome, length=to_end + 1, **fields), sim))
    return out


def test_an_action_that_mostly_led_to_success_ranks_first_and_says_so():
    neighbours = _votes(
        *[("Take the brass key.", "success", 0, 1.0)] * 4,
        ("take brass key", "failure", 3, 1.0),
        *[("look", "failure", 5, 1.0)] * 3,
        ("go north", "success", 2, 1.0),
    )
    values = action_values(neighbours, ["look", "go north", "take brass key"], CFG)
    assert list(values) == ["take brass key", "go north", "look"]
    key = values["take brass key"]
    assert key.hint == "take brass key → success 4 of 5"
    assert (key.n, key.successes, key.failures) == (5, 4, 1)
    assert key.value == pytest.approx((4 * 1.0 - 0.9**3) / 5)
    assert values["go north"].value == pytest.approx(0.9**2)
    assert values["look"].value == pytest.approx(-(0.9**5))
    assert key.support == pytest.approx(5.0) and len(key.evidence) == 5


def test_invalid_and_looping_actions_count_against_even_in_successful_episodes():
    neighbours = _votes(
        ("open door", "success", 1, 1.0, {"valid": False}),
        ("look", "success", 2, 1.0, {"repeated": True}),
        ("take brass key", "success", 0, 1.0),
    )
    values = action_values(neighbours, ["open door", "look", "take brass key"], CFG)
    assert values["open door"].value == pytest.approx(-CFG.ec_invalid_penalty)
    assert values["look"].value == pytest.approx(-CFG.ec_loop_penalty)
    assert values["take brass key"].value == 1.0
    assert values["open door"].hint == "open door → success 1 of 1 (1 invalid)"
    assert values["look"].hint.endswith("(1 repeated)")


def test_with_loop_erasure_a_detour_earns_no_credit_from_the_win_that_followed_it():
    neighbours = _votes(
        ("drop brass key", "success", 3, 1.0, {"detour": True, "subgoal_in": 1}),
        ("drop brass key", "failure", 4, 1.0, {"detour": True}),
        ("unlock door with brass key", "success", 2, 1.0),
    )
    actions = ["drop brass key", "unlock door with brass key"]
    erased = action_values(neighbours, actions, RetrievalConfig(ec_loop_erasure=True))
    assert erased["drop brass key"].value == pytest.approx(-(0.9**4) / 2)
    assert erased["drop brass key"].hint == "drop brass key → success 0 of 2"
    assert list(erased) == ["unlock door with brass key", "drop brass key"]
    plain = action_values(neighbours, actions, CFG)
    assert plain["drop brass key"].value == pytest.approx((0.9**3 - 0.9**4) / 2)
    assert plain["drop brass key"].hint == "drop brass key → success 1 of 2"


def test_ingest_marks_the_steps_loop_erasure_leaves_off_the_path():
    rooms = [HALL, "You are in the kitchen.", HALL, "You are in the pantry.", "You are in the kitchen."]
    ep = episode("r1", 0, ["go east", "go west", "go south", "go north", "take brass key"], True, rooms)
    _, steps = build_records(ep, EpisodeTags([0.0] * 5, [0.0] * 5, 0.0), 3, now=1.0)
    assert [s.detour for s in steps] == [True, True, False, False, False]


def test_votes_are_weighted_by_similarity_and_thin_or_unknown_evidence_is_left_out():
    assert vote_weight(1.0, 0.5) == 1.0 and vote_weight(0.75, 0.5) == 0.5 and vote_weight(0.3, 0.5) == 0.0
    neighbours = _votes(
        ("go north", "success", 0, 1.0),
        ("go north", "failure", 0, 0.75),
        ("go south", "success", 0, 0.4),  # below ec_min_similarity
        ("look", "unfinished", 0, 1.0),  # outcome unknown
    )
    values = action_values(neighbours, ["go north", "go south", "look"], CFG)
    assert list(values) == ["go north"]
    assert values["go north"].value == pytest.approx((1.0 - 0.5) / 1.5)
    assert values["go north"].support == pytest.approx(1.5)
    only_one = action_values(neighbours, ["go north"], RetrievalConfig(ec_neighbours=1))
    assert only_one["go north"].n == 1


def test_actions_match_by_normalised_text_then_by_verb_and_last_word():
    neighbours = _votes(("take iron key", "success", 0, 1.0), ("Go North!", "success", 0, 1.0))
    values = action_values(neighbours, ["take brass key", "take brass lamp", "go north", "go south"], CFG)
    assert set(values) == {"take brass key", "go north"}
    assert values["take brass key"].support == pytest.approx(CFG.ec_partial_weight)
    exact_only = action_values(neighbours, ["take brass key", "go north"], RetrievalConfig(ec_partial_weight=0.0))
    assert set(exact_only) == {"go north"}
    assert normalise_action("  Take the Brass KEY. ") == "take brass key"


def test_the_hint_says_when_its_votes_came_from_similar_actions_only():
    """twc, stop 50: "put lipstick in dressing table → success 0 of 10" had never been tried; all ten
    votes were other objects put on other tables (verb and last word)."""
    neighbours = _votes(
        ("put dirty shirt in work table", "failure", 2, 1.0),
        ("put pen in end table", "failure", 1, 1.0),
        ("take brass key", "success", 0, 1.0),
        ("take iron key", "success", 1, 1.0),
    )
    values = action_values(neighbours, ["put lipstick in dressing table", "take brass key"], CFG)
    table, key = values["put lipstick in dressing table"], values["take brass key"]
    assert table.hint == "put lipstick in dressing table → similar actions: success 0 of 2"
    assert table.to_dict()["similar"] == 2
    assert key.hint == "take brass key → success 2 of 2 (1 by similar action)"
    exact = action_values(neighbours[2:3], ["take brass key"], CFG)["take brass key"]
    assert exact.hint == "take brass key → success 1 of 1" and "similar" not in exact.to_dict()
    advantages = memory_advantages(neighbours, ["put lipstick in dressing table", "take brass key"], CFG)
    assert advantages["put lipstick in dressing table"].to_dict()["similar"] == 2
    assert advantages["take brass key"].to_dict()["similar"] == 1


def _value(action, value, support, wins=1, n=1):
    return ActionValue(action, value, support, n, wins, n - wins)


def test_mixed_policy_overrides_only_when_memory_is_confident_and_clearly_better():
    cfg = RetrievalConfig(mixed_threshold=0.3, mixed_min_support=1.5)
    values = {"take brass key": _value("take brass key", 0.8, 3.0, 3, 3), "look": _value("look", -0.5, 2.0, 0, 2)}
    action, by, why = choose_mixed("look", values, cfg)
    assert (action, by) == ("take brass key", "memory") and "success 3 of 3" in why
    assert choose_mixed("go north", values, cfg)[:2] == ("take brass key", "memory")  # unknown counts as 0
    assert choose_mixed("Take the brass key", values, cfg)[:2] == ("Take the brass key", "llm")  # agrees
    thin = {"take brass key": _value("take brass key", 0.9, 1.0)}
    assert choose_mixed("look", thin, cfg)[:2] == ("look", "llm")  # not enough support
    close = {"take brass key": _value("take brass key", 0.5, 3.0), "look": _value("look", 0.3, 3.0)}
    action, by, why = choose_mixed("look", close, cfg)
    assert (action, by) == ("look", "llm") and "needs 0.30" in why
    assert choose_mixed(None, values, cfg)[:2] == ("take brass key", "memory")
    assert choose_mixed(None, {}, cfg)[:2] == (None, "llm")


def test_mixed_policy_hands_loops_mistakes_and_bad_replies_to_the_memory_policy():
    cfg = RetrievalConfig(mixed_threshold=0.3, mixed_min_support=1.5)
    values = {"look": _value("look", -0.6, 2.0, 0, 2), "go north": _value("go north", 0.1, 0.5)}
    explore = lambda: ("open door", "memory: no experience of 'open door' here")  # noqa: E731
    action, by, why = choose_mixed("look", values, cfg, explore)
    assert (action, by) == ("open door", "memory") and "value -0.60" in why  # known mistake
    action, by, why = choose_mixed("go north", values, cfg, explore, tried={"Go North"})
    assert (action, by) == ("open door", "memory") and "repeats" in why
    assert choose_mixed(None, values, cfg, explore)[:2] == ("open door", "memory")
    assert choose_mixed("go north", values, cfg, explore)[:2] == ("go north", "llm")  # thin, not tried
    weak = {"look": _value("look", -0.6, 1.0, 0, 1)}
    assert choose_mixed("look", weak, cfg, explore)[:2] == ("look", "llm")  # not confident it is bad


def test_memory_policy_prefers_known_good_then_untried_then_known_bad():
    values = {"take brass key": _value("take brass key", 0.9, 4.0), "look": _value("look", -0.6, 4.0, 0, 4)}
    rng = random.Random(0)
    assert choose_memory(values, ["look", "take brass key", "go north"], rng)[0] == "take brass key"
    action, why = choose_memory({"look": values["look"]}, ["look", "go north"], rng)
    assert action == "go north" and "no experience" in why  # optimism explores
    assert choose_memory(values, ["look", "take brass key"], rng, tried=["take brass key"])[0] == "take brass key"
    cfg = RetrievalConfig(ec_loop_penalty=1.0)
    assert choose_memory({}, ["look", "go north"], rng, cfg, tried=["look"])[0] == "go north"
    with pytest.raises(ValueError, match="admissible"):
        choose_memory(values, [], rng)


def test_memory_policy_breaks_ties_with_the_seeded_rng():
    admissible = ["go north", "go south", "go east", "go west"]
    draws = [choose_memory({}, admissible, random.Random(s))[0] for s in range(40)]
    assert len(set(draws)) == 4
    assert [choose_memory({}, admissible, random.Random(5))[0] for _ in range(3)] == [draws[5]] * 3


def test_ingest_marks_episode_length_repeated_steps_and_the_next_subgoal():
    ep = episode("r1", 0, ["look", "look", "take brass key", "go north"], False, [HALL, HALL, HALL, HALL])
    ep.steps[2].info = {"subgoals": {"key": True, "door": False}}
    ep.steps[3].info = {"subgoals": {"key": True, "door": False}}
    _, steps = build_records(ep, EpisodeTags([0.0] * 4, [0.0] * 4, 0.0), 3, now=1.0)
    assert [s.repeated for s in steps] == [False, True, False, False]
    assert [s.steps_to_end for s in steps] == [3, 2, 1, 0] and steps[0].episode_length == 4
    assert [s.subgoal_in for s in steps] == [2, 1, 0, None]


def test_reaching_a_subgoal_credits_the_steps_toward_it_in_a_failed_episode():
    neighbours = _votes(
        ("go north", "failure", 9, 1.0, {"subgoal_in": 2}),
        ("look", "failure", 9, 1.0),
    )
    values = action_values(neighbours, ["go north", "look"], CFG)
    assert values["go north"].value == pytest.approx(CFG.ec_subgoal_value * 0.9**2)
    assert values["look"].value == pytest.approx(-(0.9**9))
    off = action_values(neighbours, ["go north"], RetrievalConfig(ec_subgoal_value=0.0))
    assert off["go north"].value == pytest.approx(-(0.9**9))


def test_retriever_values_admissible_actions_from_the_bank(bank):
    for i in range(4):
        bank.ingest_episode(episode("r1", i, ["take brass key"], True, [HALL]))
    bank.ingest_episode(episode("r1", 4, ["take brass key", "go north"], False, [HALL, "You are in the attic."]))
    for i in range(5, 8):
        bank.ingest_episode(episode("r1", i, ["look", "look"], False, [HALL, HALL]))
    query = RetrievalQuery("keyroom", "keyroom/key", GOAL, HALL, [], ["look", "go north", "take brass key"])
    pack = Retriever(bank, RetrievalConfig(epsilon=0.0)).retrieve(
        [query, RetrievalQuery(**{**query.__dict__, "admissible": None})]
    )
    values = pack[0].action_values
    assert list(values)[0] == "take brass key"
    assert (
        values["take brass key"].hint == "take brass key (take the key) → success 4 of 5"
    )  # keyroom names the key's role
    assert values["look"].value < 0 and values["look"].successes == 0
    assert pack[1].action_values == {}  # no admissible list, no values
    assert (
        pack[0].to_dict()["action_values"]["take brass key"]["hint"] == "take brass key (take the key) → success 4 of 5"
    )


class _PlaceEmbedding:
    """Fixed 2-d embeddings: clothes along one axis, cosmetics along the other."""

    AXES = {"coat": (1.0, 0.0), "jacket": (0.95, 0.31), "lipstick": (0.0, 1.0), "lip gloss": (0.2, 0.98)}
    calls = 0

    def __call__(self, texts):
        type(self).calls += 1
        return np.array([self.AXES[t] for t in texts], dtype=np.float32)


def test_analogy_values_a_new_objects_puts_by_the_outcomes_of_alike_objects_puts_there():
    """twc: no dev object is in the train bank. By verb and last word, a coat's put on the dressing
    table and a lipstick's put in the wardrobe both vote for any '... table' / '... wardrobe'; by
    analogy only the alike object's puts to the same place vote, weighted by the objects' similarity."""
    neighbours = _votes(
        ("put jacket in wardrobe", "success", 0, 1.0),
        ("put jacket in dressing table", "failure", 0, 1.0),
        ("put lip gloss in dressing table", "success", 0, 1.0),
        ("put lip gloss in wardrobe", "failure", 0, 1.0),
        ("put coat in end table", "success", 0, 1.0),
    )
    admissible = ["put lipstick in wardrobe", "put lipstick in dressing table"]
    by_text = action_values(neighbours, admissible, CFG)
    assert by_text["put lipstick in wardrobe"].value == pytest.approx(0.0)  # a success and a failure, alike
    cfg = CFG.model_copy(update={"ec_analogy": True, "ec_analogy_min_similarity": 0.3})
    analogy = PhraseSimilarity(_PlaceEmbedding(), cfg.ec_analogy_min_similarity)
    values = action_values(neighbours, admissible, cfg, analogy=analogy)
    table, wardrobe = values["put lipstick in dressing table"], values["put lipstick in wardrobe"]
    assert list(values) == ["put lipstick in dressing table", "put lipstick in wardrobe"]
    assert table.value > 0 > wardrobe.value
    lip_gloss = (0.98 - 0.3) / 0.7  # cos(lipstick, lip gloss) = 0.98
    jacket = (0.31 - 0.3) / 0.7
    assert table.support == pytest.approx(lip_gloss + jacket, abs=1e-3)
    assert table.n == 2 and table.similar == 2 and "similar actions" in table.hint
    assert "put lipstick in end table" not in action_values(
        neighbours, ["put lipstick in end table"], cfg, analogy=analogy
    )
    coat = action_values(neighbours, ["put coat in wardrobe"], cfg, analogy=analogy)["put coat in wardrobe"]
    assert coat.value > 0 and coat.support == pytest.approx((0.95 - 0.3) / 0.7, abs=1e-3)
    off = action_values(neighbours, admissible, CFG.model_copy(update={"ec_analogy": False}), analogy=analogy)
    assert off["put lipstick in wardrobe"].value == pytest.approx(by_text["put lipstick in wardrobe"].value)


def test_analogy_embeds_each_object_once():
    _PlaceEmbedding.calls = 0
    analogy = PhraseSimilarity(_PlaceEmbedding(), 0.3)
    analogy.prepare(["coat", "jacket"])
    analogy.prepare(["coat", "jacket", "lipstick"])
    assert analogy.weight("coat", "coat") == 1.0 and analogy.weight("coat", "lipstick") == 0.0
    assert _PlaceEmbedding.calls == 2 and set(analogy.vectors) == {"coat", "jacket", "lipstick"}
    capped = PhraseSimilarity(_PlaceEmbedding(), 0.3, max_phrases=2)
    for phrase in ("coat", "jacket", "lipstick"):
        capped.prepare([phrase])
    assert set(capped.vectors) == {"jacket", "lipstick"}  # the oldest went
    assert capped.weight("coat", "jacket") > 0.9 and set(capped.vectors) == {"coat", "jacket"}


def test_action_frame_splits_at_the_last_preposition():
    assert action_frame("Put the lip gloss in the dressing table") == ("put", "lip gloss", "in", "dressing table")
    assert action_frame("unlock door with key") == ("unlock", "door", "with", "key")
    assert action_frame("take brass key") is None and action_frame("go to kitchen") is None


def _put(run_id, i, action, scored, observation, task="twx/twc"):
    """A one-step episode whose put scored (reached a sub-goal and won) or did not."""
    ep = episode(run_id, i, [action], scored, [observation], task=task)
    ep.steps[0].info = {"subgoals": {"object put away": scored}}
    return ep


def test_analogous_values_reach_alike_objects_puts_from_any_state_and_stand_in_for_thin_local_votes(bank):
    """Nothing stored is near the query state, so episodic control has no votes; the family-wide
    analogy values the new object's puts by the alike object's (hashing embedding: 'red coat' and
    'blue coat' share a word, 'fork' shares none)."""
    far = ["You are in the hall of mirrors.", "The hall of mirrors again."]
    for i in range(3):
        bank.ingest_episode(_put("r1", i, "put blue coat in wardrobe", True, far[0]))
        bank.ingest_episode(_put("r2", i, "put blue coat in sink", False, far[1]))
    bank.ingest_episode(_put("r3", 0, "put fork in sink", True, far[1]))
    bank.ingest_episode(_put("r4", 0, "put red coat in sink", True, far[1], task="keyroom/key"))
    bank.flush()
    admissible = ["put red coat in wardrobe", "put red coat in sink", "put red coat in oven"]
    query = RetrievalQuery("twx", "twx/twc", "Tidy up.", "A bedroom with a bed.", [], admissible)
    plain = Retriever(bank, RetrievalConfig(epsilon=0.0, ec_analogy=False)).retrieve([query])[0]
    assert plain.action_values == {} and plain.analogous == {}
    cfg = RetrievalConfig(epsilon=0.0, ec_analogy=True)
    retriever = Retriever(bank, cfg)
    pack = retriever.retrieve([query])[0]
    wardrobe, sink = pack.analogous["put red coat in wardrobe"], pack.analogous["put red coat in sink"]
    assert list(pack.action_values) == ["put red coat in wardrobe", "put red coat in sink"]
    assert wardrobe.value == pytest.approx(1.0) and sink.value < 0  # the fork and keyroom/key do not vote
    assert (wardrobe.n, sink.n) == (3, 3)
    assert wardrobe.hint == "put red coat in wardrobe → similar actions: success 3 of 3"
    assert sink.hint == "put red coat in sink → similar actions: success 0 of 3"
    advantages = memory_advantages(pack.neighbours, admissible, cfg, analogous=pack.analogous)
    assert advantages["put red coat in wardrobe"].advantage > 0 > advantages["put red coat in sink"].advantage
    assert "put red coat in oven" not in advantages
    bank.ingest_episode(_put("r5", 0, "put blue coat in oven", True, far[0]))
    bank.flush()
    assert "put red coat in oven" in retriever.retrieve([query])[0].analogous  # the table is read again


def test_the_frame_table_reads_only_new_steps_after_an_ingest_and_everything_after_a_delete(bank, monkeypatch):
    hall = "You are in the hall of mirrors."
    frames = FrameSteps(bank)
    assert frames.of("twx") == {}  # nothing stored yet: the next read is a full one
    bank.ingest_episode(_put("r1", 0, "put blue coat in wardrobe", True, hall))
    bank.flush()
    wardrobe, sink = ("put", "in", "wardrobe"), ("put", "in", "sink")
    assert [obj for obj, _ in frames.of("twx")[wardrobe]] == ["blue coat"]
    reads: list = []
    scan = bank.view.scan
    monkeypatch.setattr(bank.view, "scan", lambda *a, **k: reads.append(k.get("where")) or scan(*a, **k))
    assert frames.of("twx") is frames.of("twx") and reads == []  # nothing stored since: no read
    bank.ingest_episode(_put("r2", 0, "put red coat in sink", False, hall))
    bank.flush()
    table = frames.of("twx")
    assert len(reads) == 1 and "created_at" in reads[0]  # only the steps stored since
    assert {key: [s.id for _, s in v] for key, v in table.items()} == {
        key: [s.id for _, s in v] for key, v in FrameSteps(bank).of("twx").items()
    }
    assert set(table) == {wardrobe, sink}
    bank.view.delete([table[wardrobe][0][1].id])
    reads.clear()
    assert set(frames.of("twx")) == {sink} and reads[-1] is None  # fewer steps: read in full


def test_the_frame_table_is_read_only_for_decisions_that_list_a_frame_action(bank, monkeypatch):
    """A task without "VERB OBJECT PREP TARGET" actions (keyroom/key) never pays for reading the
    family's steps."""
    bank.ingest_episode(_put("r1", 0, "put blue coat in wardrobe", True, "You are in the hall."))
    bank.flush()
    retriever = Retriever(bank, RetrievalConfig(epsilon=0.0))
    read: list[str] = []
    of = retriever.frames.of
    monkeypatch.setattr(retriever.frames, "of", lambda family: read.append(family) or of(family))
    plain = RetrievalQuery("twx", "twx/twc", "Tidy up.", "A hall.", [], ["take coat", "go north"])
    assert retriever.retrieve([plain])[0].analogous == {} and read == []
    framed = RetrievalQuery("twx", "twx/twc", "Tidy up.", "A hall.", [], ["put red coat in wardrobe"])
    assert "put red coat in wardrobe" in retriever.retrieve([plain, framed])[1].analogous and read == ["twx"]


def test_memory_bench_times_the_frame_tables_full_and_incremental_reads(bank):
    from bench.memory_bench import bench_frame_table

    for i, place in enumerate(("wardrobe", "sink", "oven")):
        bank.ingest_episode(_put("r1", i, f"put blue coat in {place}", True, "You are in the hall."))
    bank.flush()
    steps = bank.ls("step", family="twx")
    figures = bench_frame_table(bank, steps, bank.embed([s.observation for s in steps]))
    assert figures["steps"] == figures["frames"] == 3 and figures["full_read_ms"] > 0
    assert figures["after_one_new_step_ms"] > 0 and bank.view.count("step", "twx") == 4


def test_an_analogue_is_credited_with_what_it_did_not_with_its_episodes_later_win():
    cfg = RetrievalConfig()
    scored = step_record("e0", 0, "put coat in wardrobe", "success", length=3, subgoal_in=0)
    missed = step_record("e1", 0, "put coat in sink", "success", length=3, subgoal_in=1)
    lost = step_record("e2", 0, "put coat in sink", "failure", length=2)
    assert analogue_return(scored, cfg) == 1.0
    assert step_return(missed, cfg) > 0 and analogue_return(missed, cfg) == 0.0
    assert analogue_return(lost, cfg) == step_return(lost, cfg) < 0


def test_merge_analogous_keeps_local_values_of_the_action_itself():
    local = {
        "put coat in wardrobe": ActionValue("put coat in wardrobe", -0.5, 1.0, 2, 0, 2),
        "put coat in sink": ActionValue("put coat in sink", 0.4, 0.5, 1, 1, 0, similar=1),
    }
    analogous = {
        "put coat in wardrobe": ActionValue("put coat in wardrobe", 0.9, 3.0, 3, 3, 0, similar=3),
        "put coat in sink": ActionValue("put coat in sink", -0.8, 3.0, 3, 0, 3, similar=3),
    }
    merged = merge_analogous(local, analogous, CFG)
    assert merged["put coat in wardrobe"] is local["put coat in wardrobe"]  # tried here: its own votes
    assert merged["put coat in sink"] is analogous["put coat in sink"]  # only a similar action's vote here
    assert list(merged) == ["put coat in wardrobe", "put coat in sink"]  # -0.25 and -0.6 after shrinking

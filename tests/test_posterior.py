"""The posterior policy: model prior x exp(lambda * advantage / alpha), and memory's advantages."""

from __future__ import annotations

import math
import random

import pytest

from crl.agent.posterior import (
    MemoryAdvantage,
    PosteriorConfig,
    decide,
    memory_advantages,
    memory_weight,
    posterior_probs,
    state_baseline,
)
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import UntriedPrior, VoteWeights, played_by
from tests.retrieval_fixtures import step_record

CFG = RetrievalConfig()
PRIOR = {"take key": 0.5, "go north": 0.3, "look": 0.2}


def _votes(*specs):
    """(action, outcome, steps_to_end, similarity) -> neighbours."""
    return [
        (step_record(f"e{n}", 0, action, outcome, length=to_end + 1), sim)
        for n, (action, outcome, to_end, sim) in enumerate(specs)
    ]


def _adv(action, advantage, support):
    return MemoryAdvantage(action, q=advantage, baseline=0.0, support=support)


# --- the formula ----------------------------------------------------------------------------


def test_hand_computed_posterior():
    config = PosteriorConfig(beta=1.0, alpha=0.25)
    post = posterior_probs([0.8, 0.2], [0.0, 1.0], [0.0, 0.5], config)
    z = 0.8 + 0.2 * math.e**2
    assert post == pytest.approx([0.8 / z, 0.2 * math.e**2 / z])
    assert post == pytest.approx([0.351, 0.649], abs=1e-3)


def test_beta_sharpens_or_flattens_the_prior():
    sharp = posterior_probs([0.6, 0.4], [0, 0], [0, 0], PosteriorConfig(beta=2.0))
    assert sharp == pytest.approx([0.36 / 0.52, 0.16 / 0.52])
    flat = posterior_probs([0.6, 0.4], [0, 0], [0, 0], PosteriorConfig(beta=0.0))
    assert flat == pytest.approx([0.5, 0.5])


def test_beta_zero_lets_memory_alone_decide_but_keeps_impossible_actions_impossible():
    config = PosteriorConfig(beta=0.0, alpha=1.0)
    post = posterior_probs([0.9, 0.1, 0.0], [0.0, 1.0, 5.0], [1.0, 1.0, 1.0], config)
    assert post[2] == 0.0
    assert post[:2] == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)])


def test_large_alpha_leaves_the_prior():
    post = posterior_probs([0.7, 0.3], [-1.0, 1.0], [1.0, 1.0], PosteriorConfig(alpha=math.inf))
    assert post == pytest.approx([0.7, 0.3])


def test_small_alpha_follows_memory():
    post = posterior_probs([0.99, 0.01], [0.0, 0.5], [0.0, 0.9], PosteriorConfig(alpha=0.01))
    assert post[1] > 0.999


def test_memory_weight_grows_with_support_and_is_zero_without():
    assert memory_weight(0.0, 1.0) == 0.0
    assert memory_weight(1.0, 1.0) == pytest.approx(0.5)
    assert memory_weight(3.0, 1.0) == pytest.approx(0.75)
    assert memory_weight(0.5, 1.0) < memory_weight(2.0, 1.0) < 1.0


def test_bad_settings_say_what_is_allowed():
    with pytest.raises(ValueError, match="alpha"):
        PosteriorConfig(alpha=0.0)
    with pytest.raises(ValueError, match="beta"):
        PosteriorConfig(beta=-1.0)
    with pytest.raises(ValueError, match="mode"):
        PosteriorConfig(mode="best")  # type: ignore[arg-type]


# --- decisions ------------------------------------------------------------------------------


def test_no_support_leaves_the_models_distribution_unchanged():
    nothing = decide(PRIOR, {}, PosteriorConfig())
    assert nothing.posterior == pytest.approx(list(PRIOR.values()))
    unsupported = {"look": _adv("look", 2.0, 0.0)}
    same = decide(PRIOR, unsupported, PosteriorConfig())
    assert same.posterior == pytest.approx(list(PRIOR.values()))
    assert same.chosen == "take key" and not same.memory_changed_argmax and same.decided_by == "llm"


def test_confident_memory_overrides_the_argmax_and_the_record_says_so():
    memory = {"look": _adv("look", 0.8, 4.0), "take key": _adv("take key", -0.5, 4.0)}
    decision = decide(PRIOR, memory, PosteriorConfig(alpha=0.25, support_scale=1.0))
    logits = {a: math.log(p) for a, p in PRIOR.items()}
    logits["look"] += 0.8 * 0.8 / 0.25
    logits["take key"] += 0.8 * -0.5 / 0.25
    z = sum(math.exp(v) for v in logits.values())
    assert decision.posterior == pytest.approx([math.exp(logits[a]) / z for a in PRIOR])
    assert decision.chosen == "look" and decision.model_best == "take key"
    assert decision.memory_changed_argmax and decision.decided_by == "memory"
    record = decision.to_dict()
    assert record["memory_changed_argmax"] is True
    assert record["actions"]["look"]["lambda"] == pytest.approx(0.8)
    assert record["actions"]["look"]["memory"]["advantage"] == pytest.approx(0.8)
    assert "memory" not in record["actions"]["go north"]
    assert "overrode the model's 'take key'" in decision.reason


def test_an_override_passed_over_by_repeat_avoidance_is_not_called_an_override():
    memory = {"look": _adv("look", 0.8, 4.0)}
    decision = decide(PRIOR, memory, PosteriorConfig(alpha=0.25, support_scale=1.0), avoid={"look"})
    assert decision.posterior_best == "look" and decision.chosen == "take key" == decision.model_best
    assert decision.memory_changed_argmax and decision.decided_by == "llm"
    assert "overrode" not in decision.reason
    assert "memory preferred 'look' to the model's 'take key', passed over" in decision.reason
    assert "already tried here: look" in decision.reason


def test_thin_memory_does_not_override_a_clear_model_preference():
    memory = {"look": _adv("look", 0.3, 0.2)}
    decision = decide({"take key": 0.9, "look": 0.1}, memory, PosteriorConfig())
    assert decision.chosen == "take key" and not decision.memory_changed_argmax


def test_sampling_is_seeded_and_follows_the_posterior():
    config = PosteriorConfig(mode="sample")
    memory = {"go north": _adv("go north", 0.5, 2.0)}
    first = [decide(PRIOR, memory, config, random.Random(7)).chosen for _ in range(3)]
    assert len(set(first)) == 1
    rng = random.Random(0)
    draws = [decide(PRIOR, memory, config, rng).chosen for _ in range(4000)]
    expected = decide(PRIOR, memory, PosteriorConfig()).posterior
    for action, p in zip(PRIOR, expected):
        assert draws.count(action) / len(draws) == pytest.approx(p, abs=0.03)
    with pytest.raises(ValueError, match="rng"):
        decide(PRIOR, memory, config)


def test_ties_keep_the_models_choice():
    memory = {"go north": _adv("go north", 0.0, 5.0)}
    decision = decide({"go north": 0.5, "take key": 0.5}, memory, PosteriorConfig())
    assert decision.model_best == decision.posterior_best == "go north"


# --- memory's advantages --------------------------------------------------------------------


def test_an_action_that_merely_cooccurs_with_success_has_no_advantage():
    neighbours = _votes(
        ("examine door", "success", 2, 1.0),
        ("examine door", "success", 2, 1.0),
        ("take key", "success", 2, 1.0),
        ("look", "success", 2, 1.0),
    )
    adv = memory_advantages(neighbours, ["examine door", "take key", "look"], CFG)
    assert adv["examine door"].q == pytest.approx(0.81)
    assert adv["examine door"].advantage == pytest.approx(0.0)
    assert adv["examine door"].support == pytest.approx(2.0)
    decision = decide({"examine door": 0.2, "take key": 0.5, "look": 0.3}, adv, PosteriorConfig())
    assert decision.posterior == pytest.approx([0.2, 0.5, 0.3])


def test_advantage_is_what_followed_the_action_minus_what_followed_any_action():
    neighbours = _votes(
        ("take key", "success", 1, 1.0),
        ("look", "failure", 1, 1.0),
        ("look", "failure", 1, 1.0),
        ("drop coin", "failure", 1, 1.0),
    )
    baseline, support = state_baseline(neighbours, CFG)
    assert support == pytest.approx(4.0)
    assert baseline == pytest.approx((0.9 - 3 * 0.9) / 4)
    adv = memory_advantages(neighbours, ["take key", "look"], CFG)
    assert adv["take key"].advantage == pytest.approx(0.9 - baseline)
    assert adv["look"].advantage == pytest.approx(-0.9 - baseline)
    assert "drop coin" not in adv


def test_far_neighbours_give_no_support_and_no_baseline():
    neighbours = _votes(("take key", "success", 0, CFG.ec_min_similarity - 0.1))
    assert state_baseline(neighbours, CFG) == (0.0, 0.0)
    assert memory_advantages(neighbours, ["take key"], CFG) == {}


def test_experience_of_another_task_does_not_vote():
    key_moves = [
        (step.model_copy(update={"task": "keyroom/key"}), sim)
        for step, sim in _votes(*[("take key", "success", 0, 1.0)] * 3)
    ]
    chest = [
        (step.model_copy(update={"task": "keyroom/chest"}), sim)
        for step, sim in _votes(("open chest", "success", 0, 1.0), ("take key", "failure", 3, 0.9))
    ]
    adv = memory_advantages(key_moves + chest, ["take key", "open chest"], CFG, task="keyroom/chest")
    assert adv["take key"].n == 1 and adv["take key"].q < 0
    assert adv["open chest"].advantage > 0
    unconditioned = memory_advantages(key_moves + chest, ["take key", "open chest"], CFG)
    assert unconditioned["take key"].n == 4


# --- untried actions (explore_untried) -------------------------------------------------------


def test_untried_actions_get_the_optimistic_q_against_the_baseline_only_when_asked():
    neighbours = _votes(("examine door", "failure", 1, 1.0), ("examine door", "failure", 1, 1.0))
    admissible = ["examine door", "take green book", "go west"]
    assert set(memory_advantages(neighbours, admissible, CFG)) == {"examine door"}
    adv = memory_advantages(neighbours, admissible, CFG, untried=UntriedPrior(0.1))
    baseline, support = state_baseline(neighbours, CFG)
    assert baseline == pytest.approx(-0.9)
    for action in ("take green book", "go west"):
        assert adv[action].n == 0
        assert adv[action].q == pytest.approx(0.1)
        assert adv[action].advantage == pytest.approx(1.0)
        assert adv[action].support == pytest.approx(support)
    assert adv["examine door"].advantage == pytest.approx(0.0)


def test_untried_actions_rank_below_known_winners():
    neighbours = _votes(("take key", "success", 0, 1.0), ("take key", "success", 0, 1.0))
    adv = memory_advantages(neighbours, ["take key", "look"], CFG, untried=UntriedPrior(0.1))
    assert adv["look"].advantage == pytest.approx(0.1 - 1.0)
    decision = decide({"take key": 0.3, "look": 0.7}, adv, PosteriorConfig())
    assert decision.chosen == "take key"


def test_no_close_state_means_no_optimism():
    neighbours = _votes(("take key", "failure", 0, CFG.ec_min_similarity - 0.1))
    assert memory_advantages(neighbours, ["take key", "look"], CFG, untried=UntriedPrior(0.1)) == {}


def test_where_everything_tried_lost_the_untried_action_wins():
    neighbours = _votes(
        ("examine door", "failure", 1, 1.0),
        ("examine door", "failure", 1, 1.0),
        ("take green book", "failure", 1, 1.0),
    )
    probs = {"examine door": 0.6, "take green book": 0.3, "go west": 0.1}
    admissible = list(probs)
    plain = decide(probs, memory_advantages(neighbours, admissible, CFG), PosteriorConfig())
    assert plain.chosen == "examine door"  # everything tried here lost alike: no advantage anywhere
    optimistic = decide(
        probs,
        memory_advantages(neighbours, admissible, CFG, untried=UntriedPrior(0.1)),
        PosteriorConfig(explore_untried=True),
    )
    assert optimistic.chosen == "go west"
    assert optimistic.to_dict()["explore_untried"] is True


def test_capped_untried_support_keeps_an_unknown_distractor_from_outvoting_the_model():
    """Many stored failures make the baseline sure, not the guess about a never-tried action: with
    the state's whole support behind it an unlikely distractor beats the model's favourite (which
    memory saw lose once, like everything else here); capped at 1, the favourite stands."""
    failures = [("examine door", "failure", 1, 1.0)] * 5 + [("go south", "failure", 1, 1.0)]
    neighbours = _votes(*failures)
    probs = {"go south": 0.6, "examine door": 0.35, "take purple book": 0.05}
    whole = memory_advantages(neighbours, list(probs), CFG, untried=UntriedPrior(0.1))
    capped = memory_advantages(neighbours, list(probs), CFG, untried=UntriedPrior(0.1, support=1.0))
    assert whole["take purple book"].support == pytest.approx(6.0)
    assert capped["take purple book"].support == pytest.approx(1.0)
    assert capped["go south"] == whole["go south"]  # actions with votes keep their support
    assert decide(probs, whole, PosteriorConfig()).chosen == "take purple book"
    assert decide(probs, capped, PosteriorConfig(untried_support=1.0)).chosen == "go south"
    with pytest.raises(ValueError, match="untried_support"):
        PosteriorConfig(untried_support=0)


def test_untried_floor_keeps_never_tried_from_counting_against_an_action_where_memory_won():
    """In a state whose stored episodes won, the optimistic q of 0.1 sits far below the baseline:
    every untried action looks like a sure loser and one vote of a detour outranks the model's
    favourite. With the floor, "never tried here" is worth the baseline (advantage 0) and the
    favourite stands; where everything stored lost, the floor leaves the optimism as it was."""
    won = [("go north", "success", 1, 1.0)] * 4 + [("take grey bottle", "success", 6, 1.0)]
    probs = {"go west": 0.6, "take grey bottle": 0.3, "look": 0.1}
    plain = memory_advantages(_votes(*won), list(probs), CFG, untried=UntriedPrior(0.1))
    floored = memory_advantages(_votes(*won), list(probs), CFG, untried=UntriedPrior(0.1, floor=True))
    assert plain["go west"].advantage < floored["take grey bottle"].advantage < 0
    assert floored["go west"].advantage == pytest.approx(0.0) and floored["go west"].n == 0
    assert floored["take grey bottle"] == plain["take grey bottle"]
    assert decide(probs, plain, PosteriorConfig()).chosen == "take grey bottle"
    decision = decide(probs, floored, PosteriorConfig(untried_floor=True))
    assert decision.chosen == "go west" and decision.to_dict()["untried_floor"] is True

    lost = [("examine door", "failure", 1, 1.0)] * 3
    before = memory_advantages(_votes(*lost), ["examine door", "go west"], CFG, untried=UntriedPrior(0.1))
    after = memory_advantages(_votes(*lost), ["examine door", "go west"], CFG, untried=UntriedPrior(0.1, floor=True))
    assert after == before and after["go west"].advantage > 0


def test_untried_cap_on_optimism_only_lets_the_winners_action_outweigh_the_models_untried_favourite():
    """The door just opened: every stored episode here went through it and won, none went back. Capped
    at 0.25 either way, "never tried here" barely counts against going back and the model's favourite
    stands; capping only optimism, it carries the state's support and the winners' way is taken. In a
    state whose stored episodes lost, the cap on the optimistic guess is unchanged."""
    won = [("go east", "success", 2, 1.0)] * 7 + [("go east", "failure", 3, 1.0)]
    probs = {"go west": 0.65, "go east": 0.3, "look": 0.05}
    both = memory_advantages(_votes(*won), list(probs), CFG, untried=UntriedPrior(0.1, support=0.25))
    optimism = memory_advantages(
        _votes(*won), list(probs), CFG, untried=UntriedPrior(0.1, support=0.25, cap="optimism")
    )
    assert both["go west"].support == pytest.approx(0.25) and optimism["go west"].support > 5
    assert optimism["go west"].q == both["go west"].q < optimism["go west"].baseline
    assert optimism["go east"] == both["go east"]
    assert decide(probs, both, PosteriorConfig(untried_support=0.25)).chosen == "go west"
    decision = decide(probs, optimism, PosteriorConfig(untried_support=0.25, untried_cap="optimism"))
    assert decision.chosen == "go east" and decision.to_dict()["untried_cap"] == "optimism"

    lost = [("examine door", "failure", 1, 1.0)] * 6
    capped = memory_advantages(_votes(*lost), ["examine door", "go west"], CFG, untried=UntriedPrior(0.1, support=0.25))
    kept = memory_advantages(
        _votes(*lost), ["examine door", "go west"], CFG, untried=UntriedPrior(0.1, support=0.25, cap="optimism")
    )
    assert kept == capped and kept["go west"].support == pytest.approx(0.25)
    with pytest.raises(ValueError, match="untried_cap"):
        PosteriorConfig(untried_cap="pessimism")


def test_the_posteriors_untried_settings_are_one_prior_and_none_without_explore_untried():
    config = PosteriorConfig(optimism=0.2, untried_support=0.5, untried_floor=True, untried_cap="optimism")
    assert config.untried == UntriedPrior(0.2, support=0.5, floor=True, cap="optimism")
    assert PosteriorConfig(explore_untried=False).untried is None
    with pytest.raises(ValueError, match="posterior untried q"):
        PosteriorConfig(optimism=1.5)


# --- experience of other actors (other_actor_weight) ------------------------------------------

BASE = "smollm2-135m-instruct"
ADAPTED = "smollm2-135m-instruct+sft-2"


def _played(neighbours, model, adapter=None, source=None):
    update = {"model": model, "adapter": adapter} | ({"source": source} if source else {})
    return [(step.model_copy(update=update), sim) for step, sim in neighbours]


def test_played_by_matches_the_actor_key_however_the_run_named_it():
    ((step, _),) = _played(
        _votes(("take key", "success", 0, 1.0)), "smollm2-135m-instruct+sft-2", "/h/adapters/sft-2/adapter"
    )
    assert played_by(step, ADAPTED)
    assert not played_by(step, BASE)
    assert not played_by(step.model_copy(update={"model": ""}), ADAPTED)
    assert not played_by(step.model_copy(update={"source": "synthetic"}), ADAPTED)


def test_other_actors_votes_are_scaled_in_values_baseline_and_support():
    base_steps = _played(_votes(("go north", "failure", 1, 1.0), ("go north", "failure", 1, 1.0)), BASE)
    own_steps = _played(_votes(("go north", "success", 1, 1.0)), ADAPTED)
    neighbours = base_steps + own_steps
    full = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(actor=ADAPTED))
    assert full["go north"].support == pytest.approx(3.0)
    assert full["go north"].q == pytest.approx(-0.9 / 3)
    scaled = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(actor=ADAPTED, other_actor=0.25))
    assert scaled["go north"].support == pytest.approx(1.5)
    assert scaled["go north"].q == pytest.approx((0.9 - 2 * 0.25 * 0.9) / 1.5)
    assert state_baseline(neighbours, CFG, weights=VoteWeights(actor=ADAPTED, other_actor=0.25))[1] == pytest.approx(
        1.5
    )
    only_own = memory_advantages(
        neighbours,
        ["go north", "look"],
        CFG,
        untried=UntriedPrior(0.1),
        weights=VoteWeights(actor=ADAPTED, other_actor=0),
    )
    assert only_own["go north"].q == pytest.approx(0.9) and only_own["go north"].n == 1
    assert only_own["look"].support == pytest.approx(1.0)


def test_without_own_experience_weight_zero_leaves_the_model_alone():
    base_steps = _played(_votes(*[("look", "success", 0, 1.0)] * 4, *[("take key", "failure", 2, 1.0)] * 4), BASE)
    prior = {"take key": 0.7, "look": 0.3}
    trusting = decide(
        prior,
        memory_advantages(base_steps, list(prior), CFG, untried=UntriedPrior(0.1), weights=VoteWeights(actor=ADAPTED)),
        PosteriorConfig(),
    )
    assert trusting.chosen == "look"
    own_only = memory_advantages(
        base_steps, list(prior), CFG, untried=UntriedPrior(0.1), weights=VoteWeights(actor=ADAPTED, other_actor=0)
    )
    assert own_only == {}
    assert decide(prior, own_only, PosteriorConfig()).chosen == "take key"
    assert (
        memory_advantages(base_steps, list(prior), CFG, weights=VoteWeights(actor=BASE, other_actor=0))["look"].n == 4
    )


def test_other_actor_weight_must_be_a_share():
    with pytest.raises(ValueError, match="other_actor_weight"):
        PosteriorConfig(other_actor_weight=1.5)


# --- experience of other worlds (other_world_weight) ------------------------------------------
WORLD = ("keyroom/key", 0)


def _elsewhere(neighbours, seed=7):
    return [(step.model_copy(update={"seed": seed}), sim) for step, sim in neighbours]


def test_other_worlds_counts_no_longer_outvote_this_worlds_own_loss():
    """Sixteen other worlds won one step after "go north" from this same room text; this world lost
    after it. Counted alike, memory values it highly; with other worlds at 0.05 this world's loss
    decides, and at 0 only it votes."""
    others = _elsewhere(_votes(*[("go north", "success", 1, 1.0)] * 16))
    own = [(step_record("own", 0, "go north", "failure", length=2), 1.0)]
    neighbours = others + own
    alike = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(world=WORLD))
    assert alike["go north"].q == pytest.approx(15 * 0.9 / 17)
    weighted = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(world=WORLD, other_world=0.05))
    assert weighted["go north"].support == pytest.approx(1.8)
    assert weighted["go north"].q == pytest.approx((0.8 * 0.9 - 0.9) / 1.8) and weighted["go north"].q < 0
    only_own = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(world=WORLD, other_world=0))
    assert only_own["go north"].n == 1 and only_own["go north"].q == pytest.approx(-0.9)
    assert memory_advantages(others, ["go north"], CFG, weights=VoteWeights(world=WORLD, other_world=0)) == {}
    no_world = memory_advantages(neighbours, ["go north"], CFG, weights=VoteWeights(other_world=0))
    assert no_world["go north"].q == alike["go north"].q


def test_this_worlds_own_step_wins_a_similarity_tie_in_the_nearest_cut():
    others = _elsewhere(_votes(*[("go north", "success", 1, 1.0)] * 3))
    own = (step_record("own", 0, "go south", "success", length=2).model_copy(update={"id": "~own"}), 1.0)
    neighbours = [own, *others]
    assert own not in VoteWeights(world=WORLD).nearest(neighbours, 3)
    assert VoteWeights(world=WORLD, other_world=0.5).nearest(neighbours, 3)[0] == own
    three = RetrievalConfig(ec_neighbours=3)
    weights = VoteWeights(world=WORLD, other_world=0.5)
    assert "go south" in memory_advantages(neighbours, ["go north", "go south"], three, weights=weights)
    assert "go south" not in memory_advantages(neighbours, ["go north", "go south"], three)


def test_other_world_weight_must_be_a_share_and_reaches_the_vote_weights():
    with pytest.raises(ValueError, match="other_world_weight"):
        PosteriorConfig(other_world_weight=-0.1)
    weights = PosteriorConfig(other_actor_weight=0.5, other_world_weight=0.2).vote_weights(ADAPTED, WORLD, 0.25)
    assert weights == VoteWeights(0.25, ADAPTED, 0.5, WORLD, 0.2)


def test_explain_names_the_cap_on_untried_support():
    from crl.agent.explain import posterior_table

    probs = {"look": 0.6, "go west": 0.4}
    memory = {"go west": MemoryAdvantage("go west", q=0.1, baseline=-0.5, support=0.25)}
    decision = decide(probs, memory, PosteriorConfig(untried_support=0.25, explore_enabling=False)).to_dict()
    assert decision["untried_support"] == 0.25
    assert "untried actions explored with support at most 0.25)" in posterior_table(decision).title
    default = posterior_table(decide(probs, memory, PosteriorConfig()).to_dict()).title
    assert "support at most" not in default and default.endswith(", directed exploration)")
    floored = PosteriorConfig(untried_support=0.25, untried_floor=True, explore_enabling=False)
    assert posterior_table(decide(probs, memory, floored).to_dict()).title.endswith(
        "at most 0.25, never below the baseline)"
    )


def test_an_action_that_would_undo_a_held_reward_is_named_as_such():
    """`held` marks which avoided actions are there because the episode still holds their reward,
    so the step's reason and `crl explain` do not call them tried here."""
    probs = {"take shirt": 0.6, "look around": 0.3, "open drawer": 0.1}
    decision = decide(probs, {}, PosteriorConfig(), avoid={"take shirt": 1, "look around": 1}, held={"take shirt"})
    assert decision.chosen == "open drawer" and decision.held == ["take shirt"]
    assert "already tried here: look around" in decision.reason
    assert "would undo a reward the episode holds: take shirt" in decision.reason
    assert decision.to_dict()["held"] == ["take shirt"]
    assert "held" not in decide(probs, {}, PosteriorConfig()).to_dict()

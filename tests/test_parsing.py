from hypothesis import given, settings
from hypothesis import strategies as st

from crl.agent.parsing import match_action, normalise, parse_reply, split_reply

ADMISSIBLE = ["go north", "go south", "take brass key", "open chest", "unlock door with brass key", "look"]


def test_plain_thought_and_action():
    p = parse_reply("Thought: the key is here.\nAction: take brass key", ADMISSIBLE)
    assert p.thought == "the key is here."
    assert p.action == "take brass key"
    assert p.match == "exact"


def test_casing_markdown_and_quotes():
    p = parse_reply("**Thought:** go get it\n**ACTION:** `Take the Brass Key.`", ADMISSIBLE)
    assert p.action == "take brass key"
    assert p.match == "normalised"


def test_missing_thought_and_bare_action():
    assert parse_reply("go north", ADMISSIBLE).action == "go north"
    assert parse_reply("Action: look", ADMISSIBLE).thought == ""


def test_last_action_marker_wins():
    text = "Answer with Action: <action>.\nThought: go\nAction: go south"
    assert parse_reply(text, ADMISSIBLE).action == "go south"


def test_contained_action_prefers_longest():
    p = parse_reply("Action: I will unlock door with brass key now", ADMISSIBLE)
    assert p.action == "unlock door with brass key"
    assert p.match == "contained"


def test_fuzzy_match_and_threshold():
    action, kind, score = match_action("tak brass key", ADMISSIBLE, threshold=0.75)
    assert (action, kind) == ("take brass key", "fuzzy") and score >= 0.75
    assert match_action("dance wildly", ADMISSIBLE)[0] is None


def test_inadmissible_and_empty_replies_are_errors_not_exceptions():
    bad = parse_reply("Action: fly to the moon", ADMISSIBLE)
    assert bad.action is None and "not a valid action" in bad.error
    empty = parse_reply("", ADMISSIBLE)
    assert empty.action is None and "No action" in empty.error


def test_free_form_without_admissible_list():
    p = parse_reply("Thought: hm\nAction: open the fridge", None)
    assert p.action == "open the fridge" and p.match == "free"


def test_normalise_drops_articles_and_punctuation():
    assert normalise("Take the Brass KEY.") == "take brass key"


def test_split_reply_thought_only_line_format():
    assert split_reply("Thought: x\ngo north") == ("x", "go north")


@settings(max_examples=400, deadline=None)
@given(st.text(), st.one_of(st.none(), st.lists(st.text(max_size=20), max_size=6)))
def test_any_string_parses_without_raising(text, admissible):
    p = parse_reply(text, admissible)
    if admissible is not None and p.action is not None:
        assert p.action in admissible
    if p.action is None:
        assert p.error


def test_fuzzy_match_keeps_the_verb():
    assert match_action("take the green candle", ["examine green candle", "go west"])[0] is None


def test_copied_list_means_its_first_item():
    p = parse_reply("Action: go south, take brass key, look", ADMISSIBLE)
    assert p.action == "go south"

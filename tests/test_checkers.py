"""Each checker accepts a right answer and refuses a wrong one, and says why."""

from __future__ import annotations

import textwrap

import pytest

from crl.tasks.base import TaskError
from crl.tasks.checkers import (
    JUDGE_PROMPT,
    CheckerSpec,
    ExactMatch,
    LLMJudge,
    NormalisedMatch,
    NumericMatch,
    PythonChecker,
    RegexMatch,
    Verdict,
    make_checker,
    normalise,
    parse_judgement,
    parse_number,
)
from crl.tasks.jsonl_items import Item


def item(answer, prompt="Q?", **extra) -> Item:
    return Item(prompt=prompt, answer=answer, **extra)


def test_exact_strips_whitespace_only():
    c = ExactMatch()
    assert c.check("  Paris\n", item("Paris")).success
    assert not c.check("paris", item("Paris")).success
    assert not c.check("Paris.", item("Paris")).success
    v = c.check("Lyon", item(["Paris", "Lyon"]))
    assert v.success and v.checker == "exact" and v.expected == ["Paris", "Lyon"] and v.got == "Lyon"


def test_normalise_drops_case_quotes_final_punctuation_and_articles():
    assert normalise('  "The Eiffel  Tower." ') == "eiffel tower"
    assert normalise("**Ｐａｒｉｓ**!") == "paris"
    assert normalise("an apple a day") == "apple day"
    assert normalise("3.5") == "3.5"


def test_normalised_match_and_a_wrong_answer():
    c = NormalisedMatch()
    assert c.check("the eiffel tower!", item("Eiffel Tower")).success
    wrong = c.check("Big Ben", item("Eiffel Tower"))
    assert not wrong.success and wrong.got == "big ben" and "differs" in wrong.reason


def test_regex_full_match_by_default_and_search_when_asked():
    assert RegexMatch().check(" 42 km ", item(r"\d+ ?km")).success
    assert not RegexMatch().check("about 42 km", item(r"\d+ ?km")).success
    assert RegexMatch(fullmatch=False).check("about 42 km", item(r"\d+ ?km")).success
    assert not RegexMatch(fullmatch=False).check("about forty km", item(r"\d+ ?km")).success
    assert RegexMatch(ignore_case=True).check("PARIS", item("paris|lyon")).success
    assert not RegexMatch().check("PARIS", item("paris|lyon")).success


def test_regex_validate_refuses_a_bad_pattern():
    with pytest.raises(ValueError, match="not a valid regular expression"):
        RegexMatch().validate(item("(unclosed"))
    with pytest.raises(ValueError, match="not a regular expression string"):
        RegexMatch().validate(item(42))


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("42", 42.0),
        ("The answer is 1,250.5 km.", 1250.5),
        ("12 + 30 = 42", 42.0),
        ("-3.5", -3.5),
        ("5-3", 3.0),
        ("3/4", 0.75),
        ("1e-3", 0.001),
        ("no digits here", None),
    ],
)
def test_parse_number(text, number):
    assert parse_number(text) == number


def test_numeric_absolute_and_relative_tolerance():
    strict = NumericMatch()
    assert strict.check("It is 42.", item(42)).success
    assert not strict.check("42.01", item(42)).success
    assert NumericMatch(abs_tol=0.01).check("54.005", item(54)).success
    assert not NumericMatch(abs_tol=0.01).check("54.02", item(54)).success
    assert NumericMatch(abs_tol=0, rel_tol=0.01).check("1009", item(1000)).success
    assert not NumericMatch(abs_tol=0, rel_tol=0.01).check("1011", item(1000)).success
    assert NumericMatch().check("0.5", item("1/2")).success


def test_numeric_wrong_and_missing_numbers_fail_with_a_reason():
    wrong = NumericMatch().check("41", item(42))
    assert not wrong.success and wrong.got == 41.0 and "off by more" in wrong.reason
    none = NumericMatch().check("I do not know", item(42))
    assert not none.success and none.got is None and "no number" in none.reason


def test_numeric_validate_and_tolerances():
    with pytest.raises(ValueError, match="not a number"):
        NumericMatch().validate(item("forty-two"))
    with pytest.raises(ValueError, match="not a number"):
        NumericMatch().validate(item("42 apples"))
    with pytest.raises(TaskError, match=">= 0"):
        NumericMatch(abs_tol=-1)


def test_python_checker_from_a_file_with_each_return_kind(tmp_path):
    (tmp_path / "checks.py").write_text(
        textwrap.dedent(
            """
            from crl.tasks.checkers import Verdict

            def same_city(answer, item):
                return answer.strip().lower() == str(item.answer).lower()

            def with_reason(answer, item):
                return answer == "yes", "said " + answer

            def verdict(answer, item):
                return Verdict("custom", True, item.answer, answer, "always")

            def number(answer, item):
                return 1

            def broken(answer, item):
                raise KeyError("meta")
            """
        )
    )
    ref = f"{tmp_path / 'checks.py'}:"
    assert PythonChecker(ref + "same_city").check("PARIS", item("Paris")).success
    wrong = PythonChecker(ref + "same_city").check("Rome", item("Paris"))
    assert not wrong.success and wrong.checker == "python"
    reasoned = PythonChecker(ref + "with_reason").check("no", item("x"))
    assert not reasoned.success and reasoned.reason == "said no"
    assert PythonChecker(ref + "verdict").check("a", item("b")).checker == "custom"
    with pytest.raises(TaskError, match="returned int"):
        PythonChecker(ref + "number").check("a", item("b"))
    with pytest.raises(TaskError, match="raised KeyError"):
        PythonChecker(ref + "broken").check("a", item("b"))


def test_python_checker_from_a_module_and_clear_reference_errors():
    assert PythonChecker("crl.tasks.checkers:normalise").fn("A Cat") == "cat"
    with pytest.raises(TaskError, match="cannot import module 'no_such_pkg.mod'"):
        PythonChecker("no_such_pkg.mod:check")
    with pytest.raises(TaskError, match="defines no 'nothing'"):
        PythonChecker("crl.tasks.checkers:nothing")
    with pytest.raises(TaskError, match="not a function"):
        PythonChecker("crl.tasks.checkers:JUDGE_PROMPT")
    with pytest.raises(TaskError, match="module:function"):
        PythonChecker("just_a_name")
    with pytest.raises(TaskError, match="no file"):
        PythonChecker("/no/such/file.py:check")


@pytest.mark.parametrize(
    ("reply", "decision"),
    [
        ("YES", True),
        ("no", False),
        ("**Yes.** Both give 42.", True),
        ("Verdict: NO", False),
        ("I think yes and no", None),
        ("The answers agree.", None),
        ("", None),
    ],
)
def test_parse_judgement_is_tolerant_but_not_credulous(reply, decision):
    assert parse_judgement(reply) is decision


def test_llm_judge_records_its_prompt_reply_and_model():
    prompts = []

    def judge(prompt: str) -> str:
        prompts.append(prompt)
        return "YES" if "Paris" in prompt.split("Answer to grade:")[1] else "NO, it differs."

    c = LLMJudge(judge, "judge-model")
    question = item("Paris", prompt="Capital of France?", context="Europe")
    right = c.check(" Paris ", question)
    assert right.success and right.judge_model == "judge-model" and right.judge_text == "YES"
    assert prompts[0] == JUDGE_PROMPT.format(
        question="Capital of France?\n\nContext:\nEurope", reference="Paris", answer="Paris"
    )
    wrong = c.check("Rome", question)
    assert not wrong.success and wrong.judge_text == "NO, it differs." and wrong.reason == "the judge said NO"
    assert wrong.to_dict()["judge_model"] == "judge-model"


def test_llm_judge_unclear_reply_is_not_a_success():
    v = LLMJudge(lambda p: "Maybe.", "m").check("Paris", item("Paris"))
    assert not v.success and "neither" in v.reason and v.judge_text == "Maybe."


def test_spec_parsing_and_building():
    assert CheckerSpec.parse("normalized").kind == "normalised"
    python = CheckerSpec.parse("mypkg.checks:same_city")
    assert python.kind == "python" and python.function == "mypkg.checks:same_city"
    assert CheckerSpec.parse("numeric", abs_tol=0.5).label() == "numeric (abs 0.5, rel 1e-06)"
    with pytest.raises(TaskError, match="unknown checker 'fuzzy'"):
        CheckerSpec.parse("fuzzy")
    assert isinstance(make_checker(CheckerSpec(kind="regex", fullmatch=False)), RegexMatch)
    with pytest.raises(TaskError, match="needs a judging model"):
        make_checker(CheckerSpec(kind="llm-judge"))
    judged = make_checker(CheckerSpec(kind="llm-judge"), judge=lambda p: "yes", judge_model="m")
    assert judged.check("x", item("x")).judge_model == "m"


def test_verdict_dict_leaves_out_judge_fields_without_a_judge():
    assert set(Verdict("exact", True, "a", "a", "equal").to_dict()) == {
        "checker",
        "success",
        "expected",
        "got",
        "reason",
    }

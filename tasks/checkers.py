"""Checkers: whether an agent's final answer to a JSONL item counts as a success.

Each kind is a small class with `check(answer, item) -> Verdict` (and `validate(item)`, which
the loader calls on every item so a file the checker cannot use is refused with line numbers):

- `exact`: the answer, stripped of surrounding whitespace, equals an expected answer.
- `normalised`: equal after `normalise` (case, spacing, quotes, final punctuation, articles).
- `regex`: an expected answer is a regular expression the answer matches (whole answer by default).
- `numeric`: the number in the answer is within tolerance of the expected number.
- `python`: a user function `module:function` (or `path/to/file.py:function`) decides.
- `llm-judge`: a model reads the question, the reference and the answer, and replies YES or NO;
  its reply and its name are kept in the verdict.

`CheckerSpec` is the serialisable description (stored with a registered task); `make_checker`
builds the checker it describes.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from crl.tasks.base import TaskError
from crl.tasks.refs import resolve_ref

if TYPE_CHECKING:
    from crl.tasks.jsonl_items import Item

CHECKER_KINDS = ("exact", "normalised", "regex", "numeric", "python", "llm-judge")


@dataclass(frozen=True)
class Verdict:
    """A checker's decision on one answer, kept in the step's `info["verdict"]`.

    Attributes:
        checker: the checker's kind.
        success: whether the answer counts.
        expected: the item's answer (or answers).
        got: the answer as the checker read it (for `numeric`, the number it found).
        reason: one line saying why.
        judge_text: the judge's raw reply (`llm-judge` only).
        judge_model: the model that judged (`llm-judge` only).
    """

    checker: str
    success: bool
    expected: Any
    got: Any
    reason: str
    judge_text: str | None = None
    judge_model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON-safe data, without the judge fields when no judge took part."""
        data = asdict(self)
        if self.judge_model is None and self.judge_text is None:
            del data["judge_text"], data["judge_model"]
        return data


class Checker:
    """The checker protocol, with a `validate` that accepts every item."""

    name: str = "checker"

    def check(self, answer: str, item: Item) -> Verdict:
        """Decide whether `answer` is a correct final answer to `item`."""
        raise NotImplementedError

    def validate(self, item: Item) -> None:
        """Raise ValueError when `item` cannot be checked by this checker."""

    def _verdict(self, item: Item, success: bool, got: Any, reason: str, **judge: Any) -> Verdict:
        return Verdict(self.name, success, item.answer, got, reason, **judge)


ARTICLES = re.compile(r"\b(?:a|an|the)\b")
EDGE = "\"'`*_“”‘’ \t\n"


def normalise(text: str) -> str:
    """The form `normalised` compares: Unicode NFKC, case-folded, with quotes, backticks and
    markdown emphasis around the answer removed, final `.`, `!` or `?` dropped, the articles
    a/an/the removed, and runs of whitespace made one space.

    Example:
        >>> normalise('  "The Eiffel  Tower." ')
        'eiffel tower'
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    previous = None
    while previous != text:
        previous = text
        text = text.strip(EDGE).rstrip(".!?")
    return " ".join(ARTICLES.sub(" ", text).split())


class ExactMatch(Checker):
    """The answer, stripped, equals an expected answer exactly (case and punctuation count)."""

    name = "exact"

    def check(self, answer: str, item: Item) -> Verdict:
        got = answer.strip()
        hit = any(got == str(e).strip() for e in item.answers)
        return self._verdict(item, hit, got, "equal" if hit else "differs from every expected answer")


class NormalisedMatch(Checker):
    """The answer equals an expected answer after `normalise`."""

    name = "normalised"

    def check(self, answer: str, item: Item) -> Verdict:
        got = normalise(answer)
        hit = any(got == normalise(str(e)) for e in item.answers)
        reason = "equal after normalising" if hit else "differs from every expected answer after normalising"
        return self._verdict(item, hit, got, reason)


class RegexMatch(Checker):
    """An expected answer is a regular expression (Python `re` syntax) the stripped answer matches.

    Args:
        fullmatch: the whole answer must match (default); False: the pattern may match anywhere.
        ignore_case: match case-insensitively.
    """

    name = "regex"

    def __init__(self, fullmatch: bool = True, ignore_case: bool = False):
        self.fullmatch = fullmatch
        self.flags = re.IGNORECASE if ignore_case else 0
        self._compiled: dict[str, re.Pattern] = {}

    def validate(self, item: Item) -> None:
        for pattern in item.answers:
            self._pattern(pattern)

    def check(self, answer: str, item: Item) -> Verdict:
        got = answer.strip()
        how = "matches" if self.fullmatch else "contains a match of"
        for pattern in item.answers:
            compiled = self._pattern(pattern)
            if (compiled.fullmatch if self.fullmatch else compiled.search)(got):
                return self._verdict(item, True, got, f"{how} {compiled.pattern!r}")
        missed = "matches no expected pattern" if self.fullmatch else "contains no match of an expected pattern"
        return self._verdict(item, False, got, missed)

    def _pattern(self, pattern: Any) -> re.Pattern:
        if not isinstance(pattern, str):
            raise ValueError(f"answer {pattern!r} is not a regular expression string (checker regex)")
        if pattern not in self._compiled:
            try:
                self._compiled[pattern] = re.compile(pattern, self.flags)
            except re.error as exc:
                raise ValueError(f"answer {pattern!r} is not a valid regular expression ({exc})") from None
        return self._compiled[pattern]


_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+"
NUMBER = re.compile(rf"(?<![\w.])(?P<sign>[-+−]?)(?P<num>{_NUM})(?:\s*/\s*(?P<den>{_NUM}))?")


def parse_number(text: str) -> float | None:
    """The number an answer gives: the last number in it (so `12 + 30 = 42` gives 42), with
    thousands separators (`1,234.5`), exponents (`1e-3`) and fractions (`3/4`) understood; a
    sign counts only where no word or digit precedes it (`5-3` holds 5 and 3). None when the
    text holds no number.

    Example:
        >>> parse_number("The total is 1,250.5 km.")
        1250.5
    """
    matches = list(NUMBER.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    value = float(last["num"].replace(",", ""))
    if last["den"] is not None:
        den = float(last["den"].replace(",", ""))
        if den == 0:
            return None
        value /= den
    return -value if last["sign"] in ("-", "−") else value


class NumericMatch(Checker):
    """The number in the answer (`parse_number`) is within tolerance of an expected number:
    `|got - expected| <= max(abs_tol, rel_tol * |expected|)`.

    Args:
        abs_tol: absolute tolerance (0.01 accepts answers rounded to cents).
        rel_tol: tolerance relative to the expected value (0.01 is 1%).
    """

    name = "numeric"

    def __init__(self, abs_tol: float = 1e-6, rel_tol: float = 1e-6):
        if abs_tol < 0 or rel_tol < 0:
            raise TaskError(f"numeric tolerances must be >= 0 (got abs_tol={abs_tol}, rel_tol={rel_tol})")
        self.abs_tol, self.rel_tol = abs_tol, rel_tol

    def validate(self, item: Item) -> None:
        for expected in item.answers:
            _expected_number(expected)

    def check(self, answer: str, item: Item) -> Verdict:
        got = parse_number(answer)
        if got is None:
            return self._verdict(item, False, None, "the answer holds no number")
        for expected in item.answers:
            value = _expected_number(expected)
            allowed = max(self.abs_tol, self.rel_tol * abs(value))
            if math.isfinite(got) and abs(got - value) <= allowed:
                return self._verdict(item, True, got, f"within {allowed:g} of {value:g}")
        return self._verdict(item, False, got, f"{got:g} is off by more than the tolerance")


def _expected_number(expected: Any) -> float:
    if isinstance(expected, bool):
        raise ValueError(f"answer {expected!r} is not a number (checker numeric)")
    if isinstance(expected, int | float):
        return float(expected)
    value = parse_number(str(expected))
    if value is None or NUMBER.sub("", str(expected)).strip():
        raise ValueError(f"answer {expected!r} is not a number (checker numeric); write it as 42 or 0.5")
    return value


class PythonChecker(Checker):
    """A user function decides: `fn(answer: str, item: Item)` returns a bool, a `(bool, reason)`
    pair, or a `Verdict`. `item` has `prompt`, `context`, `answer`, `answers`, `id` and `meta`.

    Args:
        ref: `package.module:function` or `path/to/file.py:function`, imported when the checker
            is built (a TaskError then says what is wrong with it).
    """

    name = "python"

    def __init__(self, ref: str):
        self.ref = ref
        self.fn = resolve_ref(ref)

    def check(self, answer: str, item: Item) -> Verdict:
        try:
            result = self.fn(answer, item)
        except Exception as exc:
            raise TaskError(f"checker {self.ref} raised {type(exc).__name__}: {exc}; fix the function") from exc
        if isinstance(result, Verdict):
            return result
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool):
            return self._verdict(item, result[0], answer.strip(), str(result[1]))
        if isinstance(result, bool):
            return self._verdict(item, result, answer.strip(), f"{self.ref} returned {result}")
        raise TaskError(
            f"checker {self.ref} returned {type(result).__name__}; return a bool, (bool, reason) or a Verdict"
        )


JUDGE_PROMPT = """You are grading an answer to a question against a reference answer.

Question:
{question}

Reference answer:
{reference}

Answer to grade:
{answer}

Does the answer to grade give the same answer as the reference? Reply with one word: YES or NO."""

_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_judgement(reply: str) -> bool | None:
    """YES -> True, NO -> False, anything else -> None.

    The reply's first word decides when it is yes or no (markdown, quotes and punctuation
    around it ignored, so `**Yes.**` counts); otherwise the reply must contain exactly one of
    the two words (`Verdict: NO` counts; `yes and no` does not).

    Example:
        >>> parse_judgement("**YES** - both say 42")
        True
    """
    words = re.sub(r"[^\w\s]", " ", reply).split()
    if words and words[0].lower() in ("yes", "no"):
        return words[0].lower() == "yes"
    found = {m.lower() for m in _YES_NO.findall(reply)}
    return found == {"yes"} if len(found) == 1 else None


class LLMJudge(Checker):
    """A model grades the answer with `JUDGE_PROMPT`; an unclear reply is not a success.

    Args:
        judge: sends one prompt to the judging model and returns its reply.
        model: the judging model's name, kept in every verdict.
    """

    name = "llm-judge"

    def __init__(self, judge: Callable[[str], str], model: str):
        self.judge, self.model = judge, model

    def prompt(self, answer: str, item: Item) -> str:
        """The judge's prompt for `answer` to `item` (alternatives joined with `or`)."""
        reference = " or ".join(str(a) for a in item.answers)
        return JUDGE_PROMPT.format(question=item.text(), reference=reference, answer=answer.strip())

    def check(self, answer: str, item: Item) -> Verdict:
        reply = self.judge(self.prompt(answer, item))
        decision = parse_judgement(reply)
        reason = {True: "the judge said YES", False: "the judge said NO", None: "the judge replied neither YES nor NO"}
        return self._verdict(
            item, bool(decision), answer.strip(), reason[decision], judge_text=reply, judge_model=self.model
        )


class CheckerSpec(BaseModel):
    """A checker as stored with a registered task (`crl tasks add --checker ...`)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["exact", "normalised", "regex", "numeric", "python", "llm-judge"] = Field(
        description="Which checker decides success."
    )
    function: str | None = Field(None, description="python: `module:function` or `path/to/file.py:function`.")
    abs_tol: float = Field(1e-6, ge=0, description="numeric: absolute tolerance.")
    rel_tol: float = Field(1e-6, ge=0, description="numeric: tolerance relative to the expected value.")
    fullmatch: bool = Field(True, description="regex: the whole answer must match (False: anywhere).")
    ignore_case: bool = Field(False, description="regex: match case-insensitively.")

    @classmethod
    def parse(cls, text: str, **options: Any) -> CheckerSpec:
        """A spec from the CLI's `--checker` value: a kind name (`normalized` accepted), or a
        function reference, which means `python` with that function.

        Example: `CheckerSpec.parse("mypkg.checks:same_city")` is kind `python`, function
        `mypkg.checks:same_city`.
        """
        kind = {"normalized": "normalised", "judge": "llm-judge", "llm": "llm-judge"}.get(text, text)
        if kind not in CHECKER_KINDS and ":" in text:
            return cls(kind="python", function=text, **options)
        if kind not in CHECKER_KINDS:
            raise TaskError(f"unknown checker {text!r}; choose {', '.join(CHECKER_KINDS)} or give module:function")
        return cls(kind=kind, **options)

    @property
    def uses_judge(self) -> bool:
        """Whether the checker needs a judging model (`make_checker`'s `judge`)."""
        return self.kind == "llm-judge"

    def label(self) -> str:
        """A short description, e.g. `numeric (abs 0.01, rel 1e-06)` or `python mypkg:check`."""
        if self.kind == "numeric":
            return f"numeric (abs {self.abs_tol:g}, rel {self.rel_tol:g})"
        if self.kind == "regex":
            return "regex" + ("" if self.fullmatch else " search") + (" ignore-case" if self.ignore_case else "")
        return f"python {self.function}" if self.kind == "python" else self.kind


def make_checker(spec: CheckerSpec, judge: Callable[[str], str] | None = None, judge_model: str | None = None):
    """The checker `spec` describes.

    Args:
        spec: what to build.
        judge: for `llm-judge`, sends a prompt to the judging model and returns its reply.
        judge_model: that model's name, recorded in verdicts.

    Raises:
        TaskError: `python` without a function or with one that cannot be imported, or
            `llm-judge` without a judge.
    """
    if spec.kind == "exact":
        return ExactMatch()
    if spec.kind == "normalised":
        return NormalisedMatch()
    if spec.kind == "regex":
        return RegexMatch(spec.fullmatch, spec.ignore_case)
    if spec.kind == "numeric":
        return NumericMatch(spec.abs_tol, spec.rel_tol)
    if spec.kind == "python":
        if not spec.function:
            raise TaskError("checker python needs a function: --checker package.module:function")
        return PythonChecker(spec.function)
    if judge is None:
        raise TaskError(
            "checker llm-judge needs a judging model: play the task with `crl run` (which passes the run's "
            "model) or give the task's factory judge= and judge_model="
        )
    return LLMJudge(judge, judge_model or "unknown")


def item_validator(spec: CheckerSpec) -> Callable[[Item], None] | None:
    """What `load_items` runs on each item for `spec`'s checker (regex patterns compile, numeric
    answers are numbers), without importing a user function or needing a judge."""
    if spec.kind == "regex":
        return RegexMatch(spec.fullmatch, spec.ignore_case).validate
    if spec.kind == "numeric":
        return NumericMatch(spec.abs_tol, spec.rel_tol).validate
    return None

"""Rule operations: what a reflecting model may ask for, parsed strictly and tolerantly at once.

A reply is read as a JSON list when it holds one, else line by line:

    ADD: Take the key before you try the door.
    EDIT 3: Unlock a door with the key you carry, then open it.
    AGREE 2          (UPVOTE 2 is the same)
    DOWNVOTE 1
    REMOVE 4

    [{"op": "ADD", "text": "..."}, {"op": "EDIT", "rule": 3, "text": "..."}, {"op": "AGREE", "rule": 2}]

Numbers refer to the numbered rule list the prompt showed. Tolerated: bullets, numbering,
markdown bold, any case, `#3`, `rule 3`, `3.` or `-` in place of `:`, an `AGREE 2: <its
text>` echo (ExpeL's format), and a rule given by its exact text instead of its number.
A line that starts with an operation word but breaks the format is rejected with a
reason; other lines (the model's prose) are only counted. Nothing here touches the bank:
`memory.rule_editor` applies what survives.

Rule text is data, never instructions: control and format characters and chat-template
markers (`<|im_end|>`) are removed, whitespace collapsed, and a text that holds another
operation (two operations run together on one line) is rejected.

    >>> parse_operations("ADD: Look before you leap.\\nAGREE 2\\nEDIT x: y").summary()
    '2 accepted, 1 rejected, 0 other lines'
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

OpKind = Literal["ADD", "EDIT", "AGREE", "DOWNVOTE", "REMOVE"]
OP_WORDS = {
    "ADD": "ADD",
    "EDIT": "EDIT",
    "AGREE": "AGREE",
    "UPVOTE": "AGREE",
    "DOWNVOTE": "DOWNVOTE",
    "REMOVE": "REMOVE",
}
NEEDS_TEXT = ("ADD", "EDIT")
NEEDS_RULE = ("EDIT", "AGREE", "DOWNVOTE", "REMOVE")

_OP_ALT = "|".join(sorted(OP_WORDS, key=len, reverse=True))
_LEAD = r"^\s*(?:[-*•>]+\s*|\d+[.)]\s+|\(\d+\)\s*)*[*_`\"']*"
_LINE = re.compile(_LEAD + rf"(?P<op>{_OP_ALT})\b[*_`\"']*(?P<rest>.*)$", re.IGNORECASE)
_NUMBER = re.compile(r"^\s*(?:rule\s*)?(?:no\.?\s*)?#?\s*(?P<n>\d+)\b[*_`\"']*\s*(?P<rest>.*)$", re.IGNORECASE)
_EMBEDDED_OP = re.compile(rf"\b(?:{_OP_ALT})\b(?:\s*#?\d+)?\s*:", re.IGNORECASE)
_TEMPLATE_MARKER = re.compile(r"<\|[^|<>]{0,40}\|>|</?s>|\[/?INST\]", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


@dataclass
class RuleOp:
    """One operation asked for: `kind` on shown rule `number` (1-based) or with `text`.

    `ref_text` holds a rule named by its text instead of its number (resolved later).
    """

    kind: OpKind
    number: int | None = None
    text: str | None = None
    raw: str = ""
    ref_text: str | None = None

    def describe(self) -> str:
        """The operation as one line of the line format, e.g. `EDIT 3: ...`."""
        head = self.kind if self.number is None else f"{self.kind} {self.number}"
        return f"{head}: {self.text}" if self.text else head


@dataclass
class Rejected:
    """An operation that was dropped, what the model wrote and why."""

    raw: str
    reason: str


@dataclass
class ParsedReply:
    """What a reply asked for: operations that parsed, those rejected, and other lines."""

    ops: list[RuleOp] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    other_lines: int = 0
    format: str = "lines"

    def summary(self) -> str:
        return f"{len(self.ops)} accepted, {len(self.rejected)} rejected, {self.other_lines} other lines"


def clean_rule_text(text: str, max_chars: int) -> tuple[str | None, str]:
    """A rule text made safe to store, or None with the reason it cannot be.

    Control characters and chat-template markers go, whitespace collapses, surrounding
    quotes, bullets and markdown go; a text over `max_chars` is cut after its last full
    sentence that fits (none fits: rejected).

    Example:
        >>> clean_rule_text("  **Take the key\\x00 first.**  ", 300)
        ('Take the key first.', '')
    """
    text = _TEMPLATE_MARKER.sub(" ", str(text))
    text = "".join(
        " " if unicodedata.category(ch)[0] in "CZ" else ch for ch in text
    )  # controls, format, unassigned, odd spaces
    text = " ".join(text.split())
    text = re.sub(r"^(?:[-*•>]+\s*)+", "", text).strip().strip("*_`").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    if not text or not any(ch.isalpha() for ch in text):
        return None, "empty rule text"
    if text.startswith("<") and text.endswith(">"):
        return None, "a placeholder copied from the prompt, not a rule"
    if _EMBEDDED_OP.search(text):
        return None, "the text holds another operation (one operation per line)"
    if len(text) > max_chars:
        ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, max_chars + 1)]
        if not ends:
            return None, f"longer than {max_chars} characters without a sentence end to cut at"
        text = text[: ends[-1]].strip()
    if len(text.split()) < 2:
        return None, "a rule needs at least two words"
    return text, ""


class _JsonOp(BaseModel):
    """One operation in the JSON format; unknown keys (a model's `reason`) are ignored, not fatal."""

    model_config = ConfigDict(extra="ignore")

    op: str
    rule: int | str | None = None
    text: str | None = None

    @field_validator("op")
    @classmethod
    def _known(cls, op: str) -> str:
        word = op.strip().upper()
        if word not in OP_WORDS:
            raise ValueError(f"unknown operation {op!r}")
        return OP_WORDS[word]


_JSON_ALIASES = {
    "operation": "op",
    "type": "op",
    "action": "op",
    "id": "rule",
    "number": "rule",
    "n": "rule",
    "index": "rule",
    "rule_number": "rule",
    "content": "text",
    "rule_text": "text",
    "new_text": "text",
}


def _json_ops(reply: str) -> list[Any] | None:
    """The JSON list of operations a reply holds (bare, fenced or wrapped in an object), else None."""
    start = reply.find("[")
    obj = reply.find("{")
    candidates = []
    if start != -1:
        candidates.append(reply[start : reply.rfind("]") + 1])
    if obj != -1 and (start == -1 or obj < start):
        candidates.insert(0, reply[obj : reply.rfind("}") + 1])
    for chunk in candidates:
        try:
            data = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(data, dict):
            data = data.get("operations", data.get("ops"))
        if isinstance(data, list):
            return data
    return None


def _from_json(items: list[Any], reply: ParsedReply) -> None:
    for item in items:
        raw = json.dumps(item, ensure_ascii=False)[:500]
        if not isinstance(item, dict):
            reply.rejected.append(Rejected(raw, "not an object with an 'op'"))
            continue
        data = {_JSON_ALIASES.get(str(k).lower(), str(k).lower()): v for k, v in item.items()}
        try:
            op = _JsonOp.model_validate(data)
        except ValidationError as e:
            reply.rejected.append(Rejected(raw, "bad operation: " + "; ".join(err["msg"] for err in e.errors())))
            continue
        number: int | None = None
        ref_text: str | None = None
        if isinstance(op.rule, int) and not isinstance(op.rule, bool):
            number = op.rule
        elif isinstance(op.rule, str) and op.rule.strip().lstrip("#").isdigit():
            number = int(op.rule.strip().lstrip("#"))
        elif isinstance(op.rule, str) and op.rule.strip():
            ref_text = op.rule
        _finish(RuleOp(op.op, number, op.text, raw, ref_text), reply)  # type: ignore[arg-type]


def _from_line(line: str, reply: ParsedReply) -> None:
    m = _LINE.match(line)
    if m is None:
        if line.strip():
            reply.other_lines += 1
        return
    kind = OP_WORDS[m.group("op").upper()]
    rest = m.group("rest")
    number: int | None = None
    num = _NUMBER.match(rest)
    if num is not None:
        number = int(num.group("n"))
        rest = num.group("rest")
    rest = re.sub(r"^\s*(?:[:.\-–—=]|\)|\(.*?\))?\s*", "", rest, count=1)
    text: str | None = rest.strip() or None
    ref_text = None
    if kind in ("AGREE", "DOWNVOTE", "REMOVE"):
        if number is None and text:
            ref_text, text = text, None
        else:
            text = None  # ExpeL's "AGREE 2: <the rule's text>" echo
    if kind == "ADD":
        number = None
    _finish(RuleOp(kind, number, text, line.strip()[:500], ref_text), reply)  # type: ignore[arg-type]


def _finish(op: RuleOp, reply: ParsedReply) -> None:
    """Check the shape an operation needs (a rule for EDIT/votes, text for ADD/EDIT)."""
    if op.kind in NEEDS_RULE and op.number is None and not op.ref_text:
        reply.rejected.append(Rejected(op.raw, f"{op.kind} needs a rule number"))
        return
    if op.number is not None and op.number < 1:
        reply.rejected.append(Rejected(op.raw, f"rule number {op.number} is not in the list"))
        return
    if op.kind in NEEDS_TEXT and not (op.text or "").strip():
        reply.rejected.append(Rejected(op.raw, "empty rule text"))
        return
    if op.kind not in NEEDS_TEXT:
        op.text = None
    reply.ops.append(op)


def parse_operations(reply: str) -> ParsedReply:
    """Every operation a model's reply asks for, and every malformed one with its reason.

    Never raises: whatever the reply, the result is a list of well-formed operations (their
    rule numbers and texts are checked against the rule set later).
    """
    parsed = ParsedReply()
    reply = reply if isinstance(reply, str) else str(reply)
    items = _json_ops(reply) if ("[" in reply or "{" in reply) else None
    if items is not None:
        parsed.format = "json"
        _from_json(items, parsed)
        return parsed
    for line in reply.splitlines():
        _from_line(line, parsed)
    return parsed


# Words that carry no lesson on their own: a rule made only of these says nothing about the task.
_GENERIC_WORDS = frozenset(
    """a an the and or but if then than so to of in on at by for with from into onto as is are be
    been being was were do does did doing done have has had it its this that these those there
    here you your yours i me my we our they them their he she his her not no never always
    every each all any some more most less very just only also again first last next before
    after when while until once now make sure try trying remember rule rules lesson lessons
    important should must can could would will may might need needs thing things something
    way good bad better best well new use using follow keep""".split()
)


def content_words(text: str) -> set[str]:
    """The words of `text` that could name something in a task (lower case, generic words gone).

    Example:
        >>> sorted(content_words("Always remember to take the brass key first."))
        ['brass', 'key', 'take']
    """
    return {w for w in re.findall(r"[a-z][a-z0-9-]+", text.lower()) if w not in _GENERIC_WORDS}


def ungrounded(text: str, vocabulary: set[str]) -> str | None:
    """Why a rule text says nothing about the episodes it was drawn from, or None if it does.

    A rule must name at least one word that occurs in those episodes (their goal, the
    observations, the actions): "Always remember to remember the rules." names none.
    """
    words = content_words(text)
    if not words:
        return "names nothing from the task (only generic words)"
    if not words & vocabulary:
        return "names nothing that occurs in the episodes it was drawn from"
    return None

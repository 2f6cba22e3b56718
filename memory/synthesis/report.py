"""What a synthesis pass did: what it made, what it turned down and why, what replay cost."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crl.memory.trajectory import Episode


@dataclass
class Rejection:
    """A synthesis that was turned down.

    Attributes:
        kind: "relabel" or "stitch".
        task: the task it would have been an episode of.
        seed: the seed it was tried on.
        reason: the reason's category: "no-subtask", "no-segment", "no-match", "over-step-limit"
            (planning), a replay's code: "invalid-action", "game-over", "no-success", or "removed"
            (validated, but a user removed the same episode from the bank before: not stored again).
        detail: the reason in words.
        parents: the episode ids it would have been made from.
    """

    kind: str
    task: str
    seed: int
    reason: str
    detail: str
    parents: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SynthesisReport:
    """Counts of one synthesis pass (add reports with `+` to total several).

    Attributes:
        episodes_read: episodes looked at.
        segments: skill segments cut from them.
        segments_by_skill: per skill label, how many segments reached it.
        relabelled: synthetic sub-task successes made from failures.
        relabel_rejected: per reason, relabellings turned down.
        stitches_tried: stitched demonstrations planned (or turned down for want of segments).
        stitches_validated: those that replayed to a success.
        stitch_rejected: per reason, stitches turned down.
        replay_env_steps: environment steps spent replaying (count them as experience used).
    """

    episodes_read: int = 0
    segments: int = 0
    segments_by_skill: dict[str, int] = field(default_factory=dict)
    relabelled: int = 0
    relabel_rejected: dict[str, int] = field(default_factory=dict)
    stitches_tried: int = 0
    stitches_validated: int = 0
    stitch_rejected: dict[str, int] = field(default_factory=dict)
    replay_env_steps: int = 0

    @property
    def stitches_rejected(self) -> int:
        return sum(self.stitch_rejected.values())

    def reject(self, rejection: Rejection) -> None:
        """Count `rejection` under its kind and reason."""
        counts = self.relabel_rejected if rejection.kind == "relabel" else self.stitch_rejected
        counts[rejection.reason] = counts.get(rejection.reason, 0) + 1

    def __add__(self, other: SynthesisReport) -> SynthesisReport:
        out = SynthesisReport()
        for name, value in asdict(self).items():
            theirs = getattr(other, name)
            setattr(out, name, dict(Counter(value) + Counter(theirs)) if isinstance(value, dict) else value + theirs)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The counts as a plain dict (for JSON output)."""
        return asdict(self) | {"stitches_rejected": self.stitches_rejected}

    def lines(self) -> list[str]:
        """The report in a few lines of text (for the CLI)."""

        def by_reason(counts: dict[str, int]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"

        return [
            f"episodes read: {self.episodes_read}; segments: {self.segments} ({by_reason(self.segments_by_skill)})",
            f"relabelled: {self.relabelled}; rejected: {by_reason(self.relabel_rejected)}",
            f"stitches: {self.stitches_tried} tried, {self.stitches_validated} validated, "
            f"{self.stitches_rejected} rejected ({by_reason(self.stitch_rejected)})",
            f"environment steps spent replaying: {self.replay_env_steps}",
        ]


@dataclass
class SynthesisResult:
    """Synthetic episodes (relabelled, stitched or both), the syntheses turned down, and the counts."""

    episodes: list[Episode] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    report: SynthesisReport = field(default_factory=SynthesisReport)

    def reject(self, rejection: Rejection) -> None:
        """Keep `rejection` and count it."""
        self.rejected.append(rejection)
        self.report.reject(rejection)

    def extend(self, other: SynthesisResult) -> None:
        """Add `other`'s episodes, rejections and counts to these."""
        self.episodes.extend(other.episodes)
        self.rejected.extend(other.rejected)
        self.report = self.report + other.report

"""Would directed exploration have changed a run played without it? At each recorded decision of
the posterior policy, ask `explore_first` what it would offer first (from the recorded actions and
memory's recorded evidence, nothing tried, nothing opened by exploration: it offers at least as
much as in play). Where it offers nothing, or the recorded choice is among what it offers, the
decision stands; the run would have played identically up to its first other decision.

    python replay.py RUN/episodes.jsonl ...
"""

import json
import sys

from decisions import evidence as hint_counts

from crl.agent.directed_exploration import explore_first
from crl.memory.retrieval.episodic_control import MemoryAdvantage
from crl.tasks.actions import normalise_action


def evidence(action: str, entry: dict) -> MemoryAdvantage | None:
    """Memory's recorded evidence on one action (its successes read off the hint)."""
    mem = entry.get("memory")
    if not mem:
        return None
    ok = mem.get("successes", hint_counts(entry)[0])
    return MemoryAdvantage(action, mem["q"], mem["baseline"], mem["support"], mem.get("n", 0), mem["hint"], 0, ok)


for path in sys.argv[1:]:
    decisions = offered = changed = 0
    episodes: set[str] = set()
    taken: dict[str, set[str]] = {}
    for line in open(path):
        rec = json.loads(line)
        if rec.get("event") != "step":
            continue
        posterior = (rec["extra"].get("policy") or {}).get("posterior")
        done = taken.setdefault(rec["episode_id"], set())
        if posterior:
            decisions += 1
            memory = {a: e for a, v in posterior["actions"].items() if (e := evidence(a, v))}
            first = explore_first(list(posterior["actions"]), memory, set(), (), done) if memory else []
            offered += bool(first)
            if first and rec["action"] not in first:
                changed += 1
                episodes.add(rec["episode_id"])
        done.add(normalise_action(rec["action"]))
    print(
        f"{path}: {decisions} decisions, exploration offers actions at {offered}, changes {changed} choices in {len(episodes)} episodes"
    )

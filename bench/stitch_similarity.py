"""How well a similarity tells "the same place" from "another world", for stitching's threshold.

Stitching uses a segment from another world only when its start observation is at least
`threshold` similar to where the stitch has got to (`crl.memory.synthesis.stitch`). This bench
measures, for the lexical similarity and the bank's sentence embedding, two distributions on
keyroom worlds (`n_rooms=3`, 2 distractors, the solver's path through each compound game):

- same place: two observations of the same room of the same world in different states;
- other worlds: the start observations of two different worlds.

It prints each distribution's mean, 5th percentile and least value, the share of other-world
pairs at or above each candidate threshold, and the AUC (the chance that a random same-place
pair scores above a random other-world pair).

    python -m bench.stitch_similarity                 # seeds 0-99 same place, 0-119 other worlds
    python -m bench.stitch_similarity --json
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict

import numpy as np

from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import embedding_from_config
from crl.memory.synthesis.similarity import embedding_similarity, lexical_similarity
from crl.tasks.keyroom import KeyroomEnv, solve


def same_place_pairs(seeds: range) -> list[tuple[str, str]]:
    """Pairs of observations of one room of one world in different states, along the solver's path."""
    env = KeyroomEnv("compound", n_rooms=3, n_distractors=2)
    pairs: list[tuple[str, str]] = []
    for seed in seeds:
        obs = env.reset(seed)
        by_room: dict[int, list[str]] = defaultdict(list)
        by_room[env.state.room].append(obs.text)
        for action in solve(env, None):
            obs, _, done, _ = env.step(action)
            by_room[env.state.room].append(obs.text)
            if done:
                break
        for texts in by_room.values():
            distinct = list(dict.fromkeys(texts))
            pairs += list(itertools.combinations(distinct, 2))
    return pairs


def other_world_pairs(seeds: range) -> list[tuple[str, str]]:
    """Pairs of start observations of two different worlds."""
    env = KeyroomEnv("compound", n_rooms=3, n_distractors=2)
    starts = [env.reset(seed).text for seed in seeds]
    return list(itertools.combinations(starts, 2))


def auc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(a random positive scores above a random negative), ties counting half."""
    above = (positive[:, None] > negative[None, :]).mean()
    tied = (positive[:, None] == negative[None, :]).mean()
    return float(above + tied / 2)


def describe(name: str, same: np.ndarray, other: np.ndarray, thresholds: list[float]) -> dict:
    """The figures of one similarity."""
    return {
        "similarity": name,
        "same_place": {"pairs": len(same), "mean": same.mean(), "p5": np.percentile(same, 5), "least": same.min()},
        "other_worlds": {"pairs": len(other), "mean": other.mean(), "p95": np.percentile(other, 95)},
        "auc": auc(same, other),
        "thresholds": {
            f"{t:.2f}": {
                "same_place_kept": float((same >= t).mean()),
                "other_worlds_passing": float((other >= t).mean()),
            }
            for t in thresholds
        },
    }


def main() -> None:
    """Measure both similarities and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--same-seeds", type=int, default=100)
    parser.add_argument("--other-seeds", type=int, default=120)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    same_pairs = same_place_pairs(range(args.same_seeds))
    other_pairs = other_world_pairs(range(args.other_seeds))
    embedder = embedding_from_config(MemoryConfig())
    similarities = {"lexical": lexical_similarity, "embedding": embedding_similarity(embedder.embed)}
    thresholds = {"lexical": [0.5, 0.6, 0.7], "embedding": [0.7, 0.75, 0.8, 0.85, 0.9, 0.95]}
    figures = []
    for name, sim in similarities.items():
        same = np.array([sim(a, b) for a, b in same_pairs])
        other = np.array([sim(a, b) for a, b in other_pairs])
        figures.append(describe(name, same, other, thresholds[name]))
    if args.json:
        print(json.dumps(figures, indent=2, default=float))
        return
    for f in figures:
        s, o = f["same_place"], f["other_worlds"]
        print(
            f"{f['similarity']}: same place {s['pairs']} pairs, mean {s['mean']:.3f}, p5 {s['p5']:.3f}, "
            f"least {s['least']:.3f}; other worlds {o['pairs']} pairs, mean {o['mean']:.3f}, p95 {o['p95']:.3f}; "
            f"AUC {f['auc']:.3f}"
        )
        for t, row in f["thresholds"].items():
            print(
                f"  threshold {t}: keeps {row['same_place_kept']:.1%} of same-place pairs, "
                f"lets through {row['other_worlds_passing']:.1%} of other-world pairs"
            )


if __name__ == "__main__":
    main()

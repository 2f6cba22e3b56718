"""Leave-one-world-out: do other worlds' memory advantages predict a stored step's own outcome?

Usage: python cross_world_auc.py HOME TASK [SETTINGS_JSON]   (SETTINGS_JSON: overrides, e.g. retrieval)
"""

import json
import sys

import numpy as np

from crl.agent.config import load_settings
from crl.api import open_bank
from crl.memory.records import state_text
from crl.memory.retrieval.episodic_control import memory_advantages, step_return


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """P(score of a positive > score of a negative), ties counting one half."""
    pos, neg = score[label], score[~label]
    if not len(pos) or not len(neg):
        return float("nan")
    return float((pos[:, None] > neg[None, :]).mean() + (pos[:, None] == neg[None, :]).mean() / 2)


def main(home: str, task: str, extra: dict) -> None:
    settings = load_settings({"home": home, **extra})
    cfg = settings.retrieval
    family = task.split("/")[0]
    with open_bank(settings) as bank:
        steps = [r for r in bank.ls("step", family=family) if r.task == task and r.episode_outcome != "unfinished"]
        h = bank.config.history_steps
        texts = [state_text(r.goal, r.observation, list(r.history[-h:]) if h else []) for r in steps]
        hits = bank.query_steps(family, embeddings=bank.embed(texts), k=cfg.ec_neighbours * 6)
    print(len(steps), "steps", "ec_neighbours", cfg.ec_neighbours, "loop_erasure", cfg.ec_loop_erasure)
    rows = []
    for step, row in zip(steps, hits):
        own = step_return(step, cfg)
        others = [(h.record, h.similarity) for h in row if (h.record.task, h.record.seed) != (step.task, step.seed)]
        value = memory_advantages(others, [step.action], cfg, task=task).get(step.action)
        if own is not None and value is not None:
            rows.append((value.advantage, value.support, own, step.episode_outcome == "success"))
    adv, support, own, won = (np.array(column) for column in zip(*rows))
    print(len(rows), "steps with an other-world vote; wins", won.mean().round(3))
    print("AUC adv -> own episode won:", round(auc(adv, won), 3))
    print("corr adv, own return:", round(float(np.corrcoef(adv, own)[0, 1]), 3))
    for least in (0.0, 1.0, 3.0):
        keep = support >= least
        print(f"support>={least}: n={keep.sum()} AUC={auc(adv[keep], won[keep]):.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else {})

"""`crl explain`: what memory offered at each step, why, and what the agent then did."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from crl.memory.trajectory import Episode, MemoryOffer, Step


def explain_step(step: Step) -> dict:
    """The explanation of one step as plain data (what `--json` prints)."""
    extra = step.extra
    memory, prompt = extra.memory or MemoryOffer(), extra.prompt
    return {
        "step": step.index,
        "observation": step.observation,
        "model_reply": step.raw_output,
        "action": step.action,
        "valid": step.valid,
        "reward": step.reward,
        "decided_by": step.decided_by,
        "policy": extra.policy.to_dict() if extra.policy else None,
        "loop_break": extra.loop_break.to_dict() if extra.loop_break else None,
        "prompt": {
            "tokens": prompt.tokens,
            "budget": prompt.budget,
            "memory_keys": prompt.memory_keys,
            "dropped": prompt.dropped,
            "shortened": prompt.shortened,
        }
        if prompt
        else None,
        "memories": memory.memories,
        "action_values": memory.action_values,
        "explored": memory.explored,
        "baseline": memory.baseline,
    }


def render_explanation(console: Console, episode: Episode, only_step: int | None = None) -> None:
    """Print, step by step, the memories retrieved with their score breakdown, the action
    values, which of them reached the prompt, who decided, and the action taken."""
    outcome = "[green]success[/]" if episode.success else f"[red]{episode.status}[/]"
    console.rule(f"[bold]{episode.episode_id}[/]  {episode.task}  seed {episode.seed}  {outcome}")
    for step in episode.steps:
        if only_step is not None and step.index != only_step:
            continue
        e = explain_step(step)
        console.print(
            f"\n[bold]step {step.index}[/]  {step.observation.strip().splitlines()[-1] if step.observation.strip() else ''}"
        )
        in_prompt = set((e["prompt"] or {}).get("memory_keys") or [])
        if e["memories"]:
            table = Table(show_header=True, header_style="bold", title="retrieved", title_justify="left")
            for col in ("slot", "id", "score", "why", "in prompt"):
                table.add_column(col, overflow="fold")
            for m in e["memories"]:
                why = ", ".join(f"{k} {v:+.2f}" for k, v in m.get("breakdown", {}).items() if v)
                reason = "explore" if m.get("reason") == "explore" else ""
                table.add_row(
                    m.get("slot", ""),
                    m["id"],
                    f"{m['score']:.3f}",
                    (reason + " " + why).strip(),
                    "yes" if m["id"] in in_prompt else "no",
                )
            console.print(table)
        elif step.extra.memory is not None:
            console.print("  [dim]memory had nothing for this state[/]")
        if e["action_values"]:
            console.print(
                "  action values: "
                + "; ".join(
                    f"{v['hint']} (value {v['value']:+.2f}, support {v['support']:.1f})"
                    for v in e["action_values"].values()
                )
            )
        posterior = (e["policy"] or {}).get("posterior")
        if posterior:
            console.print(posterior_table(posterior))
        if e["prompt"]:
            p = e["prompt"]
            cut = f", dropped {len(p['dropped'])}" if p.get("dropped") else ""
            console.print(f"  prompt: {p['tokens']} of {p['budget']} tokens{cut}")
        if step.raw_output:
            console.print(f"  model replied: {step.raw_output.strip()!r}")
        decided = e["decided_by"]
        reason = (e["policy"] or {}).get("reason")
        if e["loop_break"]:
            reason = f"loop breaker replaced {e['loop_break']['replaced']!r}"
        style = "yellow" if step.valid else "red"
        console.print(
            f"  → [{style}]{step.action or '(invalid)'}[/] decided by [bold]{decided}[/]"
            + (f": {reason}" if reason else "")
            + (f"  [green]reward {step.reward:g}[/]" if step.reward else "")
        )


def posterior_table(posterior: dict) -> Table:
    """Per action: the model's probability, memory's advantage with its support and weight, and
    the posterior; the chosen action is marked (the posterior policy's step detail)."""
    title = (
        f"posterior (beta {posterior['beta']:g}, alpha {posterior['alpha']:g}, "
        f"support scale {posterior['support_scale']:g}"
        + (", untried actions explored" if posterior.get("explore_untried") else "")
        + (f" with support at most {posterior['untried_support']:g}" if posterior.get("untried_support") else "")
        + (
            " above the baseline"
            if posterior.get("untried_support") and posterior.get("untried_cap") == "optimism"
            else ""
        )
        + (", never below the baseline" if posterior.get("untried_floor") else "")
        + (", directed exploration" if posterior.get("explore_enabling") else "")
        + ")"
    )
    table = Table(show_header=True, header_style="bold", title=title, title_justify="left")
    for col in ("action", "model", "memory", "advantage", "support", "lambda", "posterior", ""):
        table.add_column(col, no_wrap=col == "action")
    rows = sorted(posterior["actions"].items(), key=lambda kv: -kv[1]["posterior"])
    for action, v in rows:
        mem = v.get("memory") or {}
        marks = [
            m
            for m, on in (
                ("chosen", action == posterior["chosen"]),
                ("model's argmax", action == posterior["model_best"]),
                (
                    "tried here",
                    action in posterior.get("avoided", [])
                    and action not in posterior.get("held", [])
                    and action not in posterior.get("revisits", [])
                    and action not in posterior.get("undoes", [])
                    and action not in posterior.get("punished", []),
                ),
                ("leads back to a place seen", action in posterior.get("revisits", [])),
                ("the way to a place not seen", action in posterior.get("ways_out", [])),
                ("undoes a change this episode made", action in posterior.get("undoes", [])),
                ("lost points earlier this episode", action in posterior.get("punished", [])),
                ("through the way just opened", action in posterior.get("ahead", [])),
                ("would undo a held reward", action in posterior.get("held", [])),
                ("explored first", action in posterior.get("explored", [])),
            )
            if on
        ]
        table.add_row(
            action,
            f"{v['model']:.3f}",
            mem.get("hint", ""),
            f"{mem['advantage']:+.2f}" if mem else "",
            f"{mem['support']:.1f}" if mem else "",
            f"{v['lambda']:.2f}",
            f"{v['posterior']:.3f}",
            ", ".join(marks),
        )
    return table

"""Write `items.jsonl`: arithmetic word problems with their answers and folds, the same every run.

Each problem needs one or two multi-digit operations, easy with the `calculator` tool in
`tools.py` and hard for a small model in its head. Ten templates are word problems, where the
expression must be worked out from the story; two (`product`, `total`) state the operation, so
the expression is the question's own numbers. Items come in rounds of one problem per template,
and whole rounds go to a fold (`split_of`), so every fold holds every kind of problem in the
same proportions: 240 items are 168 train, 36 dev and 36 test.

Usage:
    python examples/arithmetic/generate.py            # rewrites examples/arithmetic/items.jsonl
    python examples/arithmetic/generate.py -n 480 -o /tmp/items.jsonl --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

Problem = tuple[str, int | float]


def shop(r: random.Random) -> Problem:
    n, price = r.randint(12, 97), r.randint(13, 89)
    return f"A shop sells notebooks at {price} cents each. How many cents do {n} notebooks cost?", n * price


def train(r: random.Random) -> Problem:
    speed, hours = r.randint(42, 139), r.randint(3, 17)
    return (
        f"A train travels at {speed} km per hour for {hours} hours. How many kilometres does it travel?",
        speed * hours,
    )


def savings(r: random.Random) -> Problem:
    start, spent, more = r.randint(300, 999), r.randint(47, 199), r.randint(23, 150)
    question = (
        f"Lena has {start} dollars. She spends {spent} dollars on a bike, then earns {more} dollars. "
        "How many dollars does she have now?"
    )
    return question, start - spent + more


def share(r: random.Random) -> Problem:
    people, each = r.randint(6, 29), r.randint(14, 73)
    return f"{people * each} stickers are shared equally among {people} children. How many does each child get?", each


def boxes(r: random.Random) -> Problem:
    boxes_, per_box, loose = r.randint(14, 68), r.randint(12, 48), r.randint(3, 11)
    question = (
        f"A warehouse has {boxes_} boxes of {per_box} bottles and {loose} loose bottles. "
        "How many bottles are there in all?"
    )
    return question, boxes_ * per_box + loose


def area(r: random.Random) -> Problem:
    width, length = r.randint(13, 64), r.randint(21, 97)
    return (
        f"A field is {width} metres wide and {length} metres long. What is its area in square metres?",
        width * length,
    )


def minutes(r: random.Random) -> Problem:
    hours, mins = r.randint(3, 41), r.randint(5, 59)
    return f"How many minutes are there in {hours} hours and {mins} minutes?", hours * 60 + mins


def discount(r: random.Random) -> Problem:
    price, off = r.randint(24, 480), r.choice([5, 10, 15, 20, 25, 30, 35, 40])
    question = (
        f"A coat costs {price} dollars and is sold at {off}% off. What is the sale price in dollars? "
        "Give the answer to two decimal places."
    )
    return question, round(price * (100 - off) / 100, 2)


def tank(r: random.Random) -> Problem:
    hours, rate = r.randint(4, 15), r.randint(12, 37)
    full = hours * rate + r.randint(50, 400)
    question = (
        f"A tank holds {full} litres. It loses {rate} litres every hour. How many litres are left after {hours} hours?"
    )
    return question, full - rate * hours


def average(r: random.Random) -> Problem:
    days = r.randint(4, 7)
    values = [r.randint(110, 480) for _ in range(days - 1)]
    total = sum(values)
    last = (-total) % days + days * r.randint(20, 60)
    values.append(last)
    listed = ", ".join(str(v) for v in values)
    return f"A baker sold {listed} loaves on {days} days. What was the average number of loaves a day?", sum(
        values
    ) // days


def product(r: random.Random) -> Problem:
    a, b = r.randint(12, 98), r.randint(12, 98)
    return f"What is {a} times {b}?", a * b


def total(r: random.Random) -> Problem:
    a, b = r.randint(123, 987), r.randint(123, 987)
    return f"What is {a} plus {b}?", a + b


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    shop,
    train,
    savings,
    share,
    boxes,
    area,
    minutes,
    discount,
    tank,
    average,
    product,
    total,
)


def split_of(index: int) -> str:
    """The fold of item `index`: of every six rounds of `len(TEMPLATES)` items, four are train, one dev, one test."""
    round_ = (index // len(TEMPLATES)) % 6
    return "train" if round_ < 4 else "dev" if round_ == 4 else "test"


def generate(n: int = 240, seed: int = 0) -> list[dict]:
    """`n` items (`id`, `prompt`, `answer`, `split`), deterministic for `seed`.

    Example:
        >>> generate(1)[0]["split"]
        'train'
    """
    r = random.Random(seed)
    items = []
    for i in range(n):
        prompt, answer = TEMPLATES[i % len(TEMPLATES)](r)
        items.append({"id": f"arith-{i:04d}", "prompt": prompt, "answer": answer, "split": split_of(i)})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=240, help="How many items (default 240).")
    parser.add_argument("--seed", type=int, default=0, help="Random seed (default 0: the committed file).")
    parser.add_argument("-o", "--out", type=Path, default=Path(__file__).with_name("items.jsonl"), help="Output file.")
    args = parser.parse_args()
    items = generate(args.n, args.seed)
    args.out.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    counts = {f: sum(1 for i in items if i["split"] == f) for f in ("train", "dev", "test")}
    print(f"wrote {len(items)} items to {args.out} ({counts['train']}/{counts['dev']}/{counts['test']} train/dev/test)")


if __name__ == "__main__":
    main()

"""The arithmetic example's tool: a calculator that evaluates an expression without `eval`.

The expression is parsed with `ast` and only numbers, `+ - * / // % **`, parentheses and the
functions in `FUNCTIONS` are evaluated; anything else (names, attributes, calls of other
functions) is refused, so a model's tool call cannot run code.
"""

from __future__ import annotations

import ast
import math
import operator
import re

BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
FUNCTIONS = {"abs": abs, "round": round, "sqrt": math.sqrt, "min": min, "max": max}
MAX_LENGTH = 200
SPELLINGS = {"÷": "/", "^": "**", "−": "-"}
MAX_DIGITS = 1000


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Understands numbers, + - * / // % ** (also written ^), parentheses, and the functions
    abs, round, sqrt, min and max. Whole-number results have no decimal point.

    Args:
        expression: the arithmetic to do, for example "37 * 48" or "round(72 * 0.75, 2)".

    Returns:
        The value, for example "1788".

    Raises:
        ValueError: the expression is not arithmetic this calculator understands, or it
            divides by zero; the message says which.
    """
    text = _respell(expression)
    if len(text) > MAX_LENGTH:
        raise ValueError(f"expression is longer than {MAX_LENGTH} characters; split it into steps")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot read {expression!r} as arithmetic; write it like 37 * 48 + 12") from None
    try:
        value = _evaluate(tree.body)
    except ZeroDivisionError:
        raise ValueError(f"{expression!r} divides by zero") from None
    except OverflowError:
        raise ValueError(f"{expression!r} is too large to compute") from None
    return _show(value)


def _respell(expression: str) -> str:
    text = expression.strip().rstrip("=").strip()
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,250 is one number, not two arguments
    text = re.sub(r"(?<=[\d)])\s*[xX×]\s*(?=[\d(])", " * ", text)
    for written, meant in SPELLINGS.items():
        text = text.replace(written, meant)
    return text


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and _too_big(left, right):
            raise ValueError(f"{ast.unparse(node)!r} is too large to compute (more than {MAX_DIGITS} digits)")
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
        if node.keywords:
            raise ValueError(f"{node.func.id}() takes plain arguments, not keywords")
        args = [_evaluate(a) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{ast.unparse(node)!r} failed: {exc}") from None
    shown = ast.unparse(node) if isinstance(node, ast.expr) else type(node).__name__
    raise ValueError(
        f"{shown!r} is not arithmetic; use numbers, + - * / // % **, parentheses and {', '.join(FUNCTIONS)}"
    )


def _too_big(base: int | float, exponent: int | float) -> bool:
    return abs(base) > 1 and abs(exponent) * math.log10(abs(base)) > MAX_DIGITS


def _show(value: int | float) -> str:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)

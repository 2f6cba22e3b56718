"""Tools on their own: schemas (oracle: transformers' get_json_schema), argument checks, the
ReAct parser, the executor's outcomes, deadlines and idempotency, references."""

from __future__ import annotations

import json

import pytest
from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import DocstringParsingException

from crl.agent.tools import Tool, ToolContext, ToolError, as_tool, tool
from crl.agent.tools.executor import ToolExecutor, call_key
from crl.agent.tools.react import canonical_call, read_tool_call
from crl.agent.tools.resolve import resolve_tool, unique_tools
from crl.agent.tools.schema import SchemaError, function_schema
from crl.agent.tools.validate import argument_errors
from tests import tool_fixtures
from tests.tool_fixtures import blocking, calculator, convert, explode, slow


def _expression_square(x: int, label: str = "x") -> int:
    """Square a number.

    Args:
        x: the number
        label: a name for it
    """
    return x * x


async def _fetch(url: str, retries: int = 2, headers: dict[str, str] | None = None) -> str:
    """Fetch a page.

    Args:
        url: where from
        retries: how often to retry
        headers: extra headers
    """
    return url


@pytest.mark.parametrize("fn", [calculator, convert, _expression_square, _fetch, explode, blocking])
def test_schema_matches_transformers_get_json_schema(fn):
    ours = function_schema(fn)
    try:
        theirs = get_json_schema(fn)
    except DocstringParsingException as exc:
        if fn is convert:  # its `flavour (str):` Args line: transformers 5.0 does not read that form, 5.24 does
            pytest.skip(f"this transformers cannot read `name (type):` Args lines, so it is no oracle here: {exc}")
        raise
    theirs["function"].pop("return", None)  # kept apart on our side: OpenAI refuses unknown keys
    assert ours == theirs


def test_schema_reads_hints_and_docstring():
    params = function_schema(convert)["function"]["parameters"]
    assert params["required"] == ["value", "unit"]
    assert params["properties"]["unit"] == {
        "type": "string",
        "enum": ["C", "F"],
        "description": "the unit to convert to",
    }
    assert params["properties"]["precision"]["nullable"] is True
    assert (
        params["properties"]["precision"]["description"]
        == "digits after the point; the description goes on over two lines"
    )
    assert params["properties"]["flavour"]["enum"] == ["plain", "spicy"]
    assert params["properties"]["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]


def test_context_parameter_is_hidden_from_the_model():
    def lookup(key: str, context: ToolContext) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return f"{context.episode_id}:{key}"

    t = as_tool(lookup)
    assert list(t.parameters["properties"]) == ["key"]
    assert t.context_param == "context"
    assert t.arguments_for({"key": "k"}, ToolContext(episode_id="e1")) == {"key": "k", "context": ToolContext("e1")}


def test_schema_errors_name_the_fix():
    def undocumented(x: int) -> int:
        return x

    def untyped(x) -> int:
        """Do it.

        Args:
            x: the thing
        """
        return x

    def undescribed(x: int, y: int) -> int:
        """Do it.

        Args:
            x: the thing
        """
        return x

    with pytest.raises(SchemaError, match="no docstring"):
        function_schema(undocumented)
    with pytest.raises(SchemaError, match="no type hint"):
        function_schema(untyped)
    with pytest.raises(SchemaError, match="'y' is not described; add 'y: ...' under Args:"):
        function_schema(undescribed)


def test_decorator_keeps_the_function_callable():
    @tool(name="sq", timeout_s=3)
    def square(x: int) -> int:
        """Square.

        Args:
            x: the number
        """
        return x * x

    assert isinstance(square, Tool) and square.name == "sq" and square.timeout_s == 3
    assert square(4) == 16
    assert slow.is_async and slow.timeout_s == 0.2


def test_argument_errors():
    params = function_schema(convert)["function"]["parameters"]
    assert argument_errors(params, {"value": 3.5, "unit": "C", "precision": None}) == []
    assert argument_errors(params, {"value": "hot", "unit": "K"}) == [
        "argument 'unit': 'K' is not one of ['C', 'F']",
        "argument 'value': 'hot' is not of type 'number'",
    ]
    assert argument_errors(params, {"unit": "C"}) == ["'value' is a required property"]
    assert argument_errors(params, {"value": 1, "unit": "C", "colour": "red"})[0].startswith(
        "unknown argument 'colour'; this tool takes: value, unit"
    )
    assert argument_errors(params, ["not", "an", "object"]) == ["the arguments must be a JSON object, not list"]


TOOLS = {
    "calculator": function_schema(calculator)["function"]["parameters"],
    "final_answer": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    "convert": function_schema(convert)["function"]["parameters"],
}


@pytest.mark.parametrize(
    "reply, name, arguments",
    [
        ('Action: calculator {"expression": "2+3"}', "calculator", {"expression": "2+3"}),
        (
            'Thought: add first\nAction: calculator: {"expression": "2+3"}\nObservation: 5',
            "calculator",
            {"expression": "2+3"},
        ),
        ("Action: calculator({'expression': '2+3',})", "calculator", {"expression": "2+3"}),
        ('Action: calculator(expression="2+3")', "calculator", {"expression": "2+3"}),
        ('Action: {"name": "calculator", "arguments": {"expression": "2+3"}}', "calculator", {"expression": "2+3"}),
        ('Action: `Calculator` {"expression": "2+3"}', "calculator", {"expression": "2+3"}),
        ('Action: ```json\ncalculator {"expression": "7"}\n```', "calculator", {"expression": "7"}),
        ("Action: final_answer 391", "final_answer", {"answer": "391"}),
        ('Action: final_answer("391")', "final_answer", {"answer": "391"}),
        ("Action: final_answer(391)", "final_answer", {"answer": "391"}),
        (
            'Action: convert {"value": 1.5, "unit": "C", "tags": ["a", "b"]}',
            "convert",
            {"value": 1.5, "unit": "C", "tags": ["a", "b"]},
        ),
    ],
)
def test_react_parser_reads_messy_calls(reply, name, arguments):
    parsed = read_tool_call(reply, TOOLS)
    assert parsed.error is None, parsed.error
    assert (parsed.name, parsed.arguments) == (name, arguments)


@pytest.mark.parametrize(
    "reply, error",
    [
        ("Action: ", "no tool call found"),
        ('Action: search {"q": "x"}', "there is no tool 'search'; the tools are: calculator, final_answer, convert"),
        ('Action: calculator {"expression": "2+3"', "not closed"),
        ("Action: convert 3 degrees", "write the arguments of convert as a JSON object"),
        ("I think the answer is 5.", "no tool"),
    ],
)
def test_react_parser_explains_what_it_cannot_read(reply, error):
    parsed = read_tool_call(reply, TOOLS)
    assert parsed.arguments is None or parsed.name is None or parsed.error
    assert error in parsed.error


def test_canonical_call_sorts_arguments():
    assert canonical_call("f", {"b": 1, "a": "x"}) == 'f {"a": "x", "b": 1}'


def test_executor_outcomes_are_observations_not_crashes():
    tools = [as_tool(calculator), as_tool(explode), slow, as_tool(blocking, timeout_s=0.2)]
    ex = ToolExecutor(tools)
    try:
        assert ex.call("calculator", {"expression": "6*7"}, "k1").text == "42"
        bad = ex.call("calculator", {"expression": 6}, "k2")
        assert (bad.status, bad.text) == (
            "invalid",
            "calculator was not called: argument 'expression': 6 is not of type 'string'",
        )
        unknown = ex.call("search", {}, "k3")
        assert unknown.status == "unknown" and "calculator, explode, slow, blocking" in unknown.text
        boom = ex.call("explode", {"reason": "nope"}, "k4")
        assert (boom.status, boom.text) == ("error", "explode failed: RuntimeError: exploded: nope")
        late = ex.call("slow", {"seconds": 5}, "k5")
        assert late.status == "timeout" and "within 0.2 s" in late.text and late.seconds < 2
        assert ex.call("blocking", {"seconds": 3}, "k6").status == "timeout"
        assert ex.call("slow", {"seconds": 0}, "k7").text == "woke up"
    finally:
        ex.close()


def test_same_idempotency_key_runs_a_tool_once(tmp_path):
    journal = tmp_path / "tool_calls.jsonl"
    tool_fixtures.CALLS.clear()
    key = call_key("ep-1", 3, canonical_call("calculator", {"expression": "1+1"}))
    ex = ToolExecutor([as_tool(calculator)], journal)
    first = ex.call("calculator", {"expression": "1+1"}, key)
    again = ex.call("calculator", {"expression": "1+1"}, key)
    assert (first.text, first.cached, again.text, again.cached) == ("2", False, "2", True)
    other_step = ex.call("calculator", {"expression": "1+1"}, call_key("ep-1", 4, "x"))
    assert not other_step.cached
    assert tool_fixtures.CALLS == ["1+1", "1+1"] and ex.executions == 2
    ex.close()
    # A new process (a resumed run) reads the journal: the call is not made again.
    resumed = ToolExecutor([as_tool(calculator)], journal)
    assert resumed.call("calculator", {"expression": "1+1"}, key).cached
    assert tool_fixtures.CALLS == ["1+1", "1+1"] and resumed.executions == 0
    journal.write_text(journal.read_text() + '{"key": "torn')  # a killed run's last line
    assert ToolExecutor([as_tool(calculator)], journal).call("calculator", {"expression": "1+1"}, key).cached


def test_resolve_references():
    by_file = resolve_tool("tests/tool_fixtures.py:calculator", timeout_s=5)
    assert (
        by_file.name == "calculator"
        and by_file.timeout_s == 5
        and by_file.source == "tests/tool_fixtures.py:calculator"
    )
    assert resolve_tool("tests.tool_fixtures:slow").timeout_s == 0.2
    with pytest.raises(ToolError, match="no 'nothing'"):
        resolve_tool("tests.tool_fixtures:nothing")
    with pytest.raises(ToolError, match="tool 'tests.tool_fixtures:Unit'"):
        resolve_tool("tests.tool_fixtures:Unit")
    other = as_tool(calculator, source="elsewhere")
    with pytest.raises(ToolError, match="two tools are named 'calculator'"):
        unique_tools([by_file, other])
    assert len(unique_tools([by_file, by_file])) == 1


def test_schema_is_json_serialisable_for_the_api():
    assert json.loads(json.dumps(as_tool(convert).schema()))["function"]["name"] == "convert"

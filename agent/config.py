"""The one configuration object: defaults < `crl.toml` < environment `CRL_*` < CLI flags.

Sections are nested models; in the environment a nested field is `CRL_<SECTION>__<FIELD>`
(for example `CRL_LLM__BACKEND=openai`), and the data directory is `CRL_HOME`. The TOML file
is `./crl.toml`, or the path in `CRL_CONFIG`, or `--config`.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from crl.agent.redaction import MASK, is_secret_key, redact_settings, redact_text
from crl.finetune.config import FinetuneConfig
from crl.memory.config import MemoryConfig
from crl.memory.reflection.config import ReflectorConfig
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.synthesis.config import SynthesisConfig

ENV_PREFIX = "CRL_"
NESTED_DELIMITER = "__"
DEFAULT_CONFIG_FILE = "crl.toml"


class LLMSettings(BaseModel):
    """Which model acts, and how it decodes."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "local", "openai"] = Field(
        "auto",
        description="auto: openai when base_url is set, else local (the embedded model when no model is set).",
    )
    model: str | None = Field(
        None,
        description="Hub id, local folder or .gguf file (local), or model name (openai). Unset: embedded SmolLM2-135M-Instruct.",
    )
    adapter: str | None = Field(None, description="LoRA adapter folder to load on a local model.")
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, Ollama, llama.cpp)."
    )
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    api_key: SecretStr | None = Field(None, description="API key (prefer api_key_env; never logged).")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout of the openai backend.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on 429, 5xx and connection errors.")
    device: str = Field("auto", description="auto, cpu or cuda (local backend).")
    dtype: str = Field("auto", description="auto (bf16 on CUDA, fp32 on CPU), bf16, fp16 or fp32.")
    temperature: float = Field(0.0, ge=0, description="0 is greedy decoding.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass when temperature > 0.")
    max_new_tokens: int = Field(48, ge=1, description="Most tokens generated per agent step.")
    seed: int | None = Field(0, ge=0, description="Sampling seed for reproducible runs.")


class PosteriorSettings(BaseModel):
    """pi(a|s) proportional to pi_model(a|s)^beta * exp(lambda * A_mem(s,a) / alpha) (`agent.posterior`)."""

    model_config = ConfigDict(extra="forbid")

    beta: float = Field(1.0, ge=0, description="Exponent of the model's prior; 0 ignores the model.")
    alpha: float = Field(
        0.25, gt=0, description="Memory's temperature: an advantage of alpha multiplies the odds by e."
    )
    support_scale: float = Field(
        1.0, gt=0, description="Support at which memory's evidence counts half (lambda = support / (support + this))."
    )
    mode: Literal["greedy", "sample"] = Field("greedy", description="greedy: the posterior's argmax; sample: draw.")
    draw: int = Field(
        0,
        ge=0,
        description="Which draw of the sampled posterior (mode sample): the same draw samples the same actions "
        "per seed and step; `crl eval --attempts` takes a new draw for each retry.",
    )
    same_task: bool = Field(
        True, description="Only experience of the same task (family/variant) gives advantages (no negative transfer)."
    )
    temperature: float = Field(
        1.0, gt=0, description="Softmax temperature over the model's token-normalised action log-likelihoods."
    )
    explore_untried: bool = Field(
        True,
        description="Where memory holds close states, value actions none of them took at `optimism` "
        "(so demoting a known loser hands the step to an untried action).",
    )
    optimism: float = Field(0.1, ge=-1, le=1, description="q of an untried action when explore_untried is on.")
    untried_support: float | None = Field(
        None,
        gt=0,
        description="The most support an untried action's optimistic q carries; unset: the state's whole support "
        "(which says how sure the baseline is, not the guess about an action nobody took).",
    )
    untried_floor: bool = Field(
        False,
        description="An untried action's q is never below the state's baseline: where stored episodes mostly won, "
        "'never tried here' is no evidence against an action, so one stored vote of a detour no longer outranks "
        "the model's untried favourite.",
    )
    untried_cap: Literal["both", "optimism"] = Field(
        "both",
        description="Which untried guesses untried_support caps: 'both', or 'optimism' (only those valued above "
        "the state's baseline, where stored episodes mostly lost). With 'optimism', in a state whose stored "
        "episodes mostly won, an action none of them took carries the state's whole support against it, so "
        "what the winners did there (go through the door just opened) outweighs the model's untried favourite.",
    )
    explore_enabling: bool = Field(
        True,
        description="Directed exploration (`agent.directed_exploration`): where memory saw listed uses of a held "
        "object ('put X in P') fail and none succeed, first use a place exploration opened this episode (once), "
        "else open a closed one ('open P' for a place no listed action targets). A use this episode lost points "
        "on (agent.punished) counts as failed, whatever memory says of it.",
    )
    condition: Literal["purpose", "task"] = Field(
        "purpose",
        description="With same_task, what voting experience shares: purpose (the sub-goal it worked toward: "
        "door-task steps vote in a compound game's door phase) or task (the same task only).",
    )
    other_actor_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="The factor on votes of stored steps another actor played (base model, older adapter, "
        "synthesis): off-policy evidence for the acting model. 1: every actor alike; 0: only its own steps among the nearest vote.",
    )
    other_world_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="The factor on votes of stored steps of other worlds (another task or seed) than the one "
        "played. 1: every world alike; below 1 a world's own earlier steps (an evaluation's retries) outweigh "
        "other worlds' counts on the same state text and come first among equally similar neighbours; 0: "
        "only its own steps vote.",
    )
    candidates: int = Field(
        12,
        ge=1,
        description="Where a task lists no actions but its environment lists the valid ones (ScienceWorld): "
        "the most actions scored per step, built from the model's free reply (the valid action it names and "
        "those nearest to it) and memory's actions valid now (`agent.candidates`).",
    )

    def policy(self):
        """The `agent.posterior.PosteriorPolicy` these settings describe."""
        from crl.agent.posterior import PosteriorConfig, PosteriorPolicy

        config = PosteriorConfig(
            self.beta,
            self.alpha,
            self.support_scale,
            self.mode,
            self.same_task,
            self.explore_untried,
            self.optimism,
            self.condition,
            self.other_actor_weight,
            other_world_weight=self.other_world_weight,
            untried_support=self.untried_support,
            untried_floor=self.untried_floor,
            untried_cap=self.untried_cap,
            explore_enabling=self.explore_enabling,
            draw=self.draw,
        )
        return PosteriorPolicy(config, self.temperature)


class AgentSettings(BaseModel):
    """The agent loop and its guards."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(None, ge=1, description="Step limit per episode; unset: the task's own limit.")
    max_episode_tokens: int = Field(
        200_000, ge=1, description="Token budget per episode (prompt + completion, summed over steps)."
    )
    max_episode_seconds: float = Field(600.0, ge=0, description="Wall-clock limit per episode.")
    history_window: int = Field(4, ge=0, description="Recent steps shown in the prompt.")
    max_prompt_tokens: int = Field(
        1024, ge=1, description="Token budget of one step's prompt; memory items are fitted into what is left."
    )
    max_observation_tokens: int = Field(
        400, ge=1, description="Observations longer than this are shortened in the prompt."
    )
    parallel: int = Field(8, ge=1, le=1024, description="Episodes played at once, their prompts batched together.")
    reply_format: Literal["auto", "react", "action"] = Field(
        "auto",
        description="react: 'Thought:' then 'Action:'; action: 'Action:' only. auto: action for the "
        "embedded 135M model (it loses the action after a thought), react for every other model.",
    )
    tool_choice: Literal["auto", "score", "generate"] = Field(
        "auto",
        description="Tool-using tasks in text mode. score: score the tool names, then prime the reply with the "
        "chosen tool's opening so the model writes only the arguments (`agent.tool_choice`); generate: the "
        "model writes the whole call; auto: score with the local backend, generate with the others.",
    )
    loop_breaker: bool = Field(
        True,
        description="Replace a reply the model already gave in the same situation by an untried "
        "admissible action (greedy decoding on deterministic games otherwise loops forever).",
    )
    held_rewards: bool = Field(
        True,
        description="With the loop breaker, also pass over an action whose reward the episode still holds, on tasks "
        "that declare repeating it undoes it (TaskSpec.repeat_undoes_reward: twc's take-back of an item put away).",
    )
    idle_actions: bool = Field(
        True,
        description="With the loop breaker, pass over everywhere in an episode an action listed at every step so far "
        "that changed nothing each time it was taken, and those the task declares idle (TaskSpec.idle_actions: "
        "TextWorldExpress's look around and inventory), not only where they were tried; and those the task says "
        "the observation shows would change nothing (TaskSpec.no_ops: opening a door described as open).",
    )
    frontier: bool = Field(
        True,
        description="With the loop breaker, pass over moves back to a place visited since the episode's last reward "
        "or sub-goal while another choice remains, on tasks that name their places (TaskSpec.places: TextWorldExpress, "
        "keyroom); where every move leads back, the one that starts the shortest known way to a place not seen yet is "
        "not passed over, and where no such way is known none is once the agent has acted in the place.",
    )
    undos: bool = Field(
        True,
        description="With the loop breaker, on tasks that declare what their actions set (TaskSpec.toggles: "
        "TextWorldExpress's doors and containers, open or closed), pass over setting a thing to the state the "
        "episode already set it to (opening the door it opened) and setting back one it changed since the last "
        "reward (closing that door, from either side).",
    )
    punished: bool = Field(
        True,
        description="With the loop breaker, pass over for the rest of the episode, while another choice remains, an "
        "action that lost points when it was taken earlier in the episode (twc's put in the wrong place), wherever "
        "the agent now stands: a deterministic game takes the points again. Not on an episode where most steps so "
        "far lost points (a task with a cost on every step).",
    )
    follow_through: bool = Field(
        True,
        description="With the frontier, when the last action opened a way on where the agent stands (a door, on "
        "TextWorldExpress) to a place not seen yet, a move through it comes before any other move the policy "
        "would take: the room just opened is explored before the agent walks away and has to come back.",
    )
    fuzzy_threshold: float = Field(
        0.75, ge=0, le=1, description="Similarity needed to map a reply onto an admissible action."
    )
    log_prompts: Literal["memory", "all", "off"] = Field(
        "memory",
        description="Which steps log their exact prompt messages: memory (those whose prompt held "
        "memories, the only ones a replay cannot rebuild from the log; fine-tuning then trains on "
        "exactly what the agent saw), all, or off.",
    )
    memory: Literal["off", "cases", "steps", "full"] = Field(
        "full",
        description="Memories put into prompts: off, cases (similar episodes, successes and failures), "
        "steps (what was done in similar states, with action values), full (all, plus rules).",
    )
    policy: Literal["llm", "memory", "mixed", "posterior", "random"] = Field(
        "posterior",
        description="Who picks the action: llm; memory (episodic control, no model call when actions are "
        "listed); mixed (the model, unless memory holds a confident, clearly better value); posterior (the "
        "model scores every listed action and memory's advantages reweight them: agent.posterior); random "
        "(a uniformly random admissible action: the baseline to beat).",
    )
    posterior: "PosteriorSettings" = Field(
        default_factory=lambda: PosteriorSettings(),
        description="How the posterior policy combines the model's probabilities with memory's advantages.",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Tools offered besides the task's own: references `module:function` or "
        "`path/to/file.py:function` to typed, documented functions (`crl run --tool`).",
    )
    mcp: list[str] = Field(
        default_factory=list,
        description="MCP servers whose tools are offered: a command line (stdio) or an http(s) URL (`crl run --mcp`).",
    )
    tool_calling: Literal["auto", "native", "react"] = Field(
        "auto",
        description="How the model calls tools: native (the backend's tool calling, openai backend), react "
        "(written as 'Action: tool {json}' and parsed), auto (native where the backend supports it).",
    )
    tool_timeout_s: float = Field(30.0, gt=0, description="Seconds one tool call may take before it is an error.")
    recall: bool = Field(
        True,
        description="With memory in the loop, offer tool-using episodes the `recall(query, k)` tool: the agent "
        "searches its own experience on demand; what it shows is credited like the prompt's memories.",
    )


class Settings(BaseSettings):
    """Effective configuration of a `crl` command."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        extra="forbid",
        toml_file=None,
    )

    home: Path = Field(Path(".crl"), description="Data directory: runs, memory, adapters, datasets, model cache.")
    llm: LLMSettings = Field(default_factory=LLMSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    reflect: ReflectorConfig = Field(default_factory=ReflectorConfig)
    finetune: FinetuneConfig = Field(default_factory=FinetuneConfig)
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = _CONFIG_FILE_CONTEXT.get("path")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def evals_dir(self) -> Path:
        return self.home / "evals"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def memory_dir(self) -> Path:
        return self.home / "memory"


_CONFIG_FILE_CONTEXT: dict[str, Path | None] = {"path": None}


def config_file_path(explicit: str | Path | None = None) -> Path | None:
    """The TOML file in effect: `explicit`, else `$CRL_CONFIG`, else `./crl.toml` if it exists."""
    if explicit:
        p = Path(explicit)
        if not p.exists():
            raise FileNotFoundError(f"config file {p} does not exist")
        return p
    env = os.environ.get(ENV_PREFIX + "CONFIG")
    if env:
        p = Path(env)
        if not p.exists():
            raise FileNotFoundError(f"config file {p} (from ${ENV_PREFIX}CONFIG) does not exist")
        return p
    p = Path(DEFAULT_CONFIG_FILE)
    return p if p.exists() else None


def load_settings(overrides: dict[str, Any] | None = None, config_file: str | Path | None = None) -> Settings:
    """Build the settings from all layers; `overrides` are CLI flags as a nested dict.

    Nested sections are deep-merged across layers, so
    `load_settings({"llm": {"backend": "openai"}})` overrides only `llm.backend` and keeps
    `llm.model` from `CRL_LLM__MODEL` or `crl.toml`.
    """
    path = config_file_path(config_file)
    toml = _toml_layer(path)  # a syntax error is reported here, naming the file
    _CONFIG_FILE_CONTEXT["path"] = path
    try:
        return Settings(**(overrides or {}))
    except ValidationError as exc:
        raise ValueError(_describe_invalid(exc, overrides or {}, toml, path)) from None
    except SettingsError:
        raise ValueError(_describe_unparsable_env()) from None
    finally:
        _CONFIG_FILE_CONTEXT["path"] = None


def _toml_layer(path: Path | None) -> dict[str, Any]:
    """The TOML file as a dict; a ValueError naming the file when it cannot be read as TOML."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"config file {path} is not UTF-8 text (byte {exc.start}): TOML files are UTF-8") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a directory, not a TOML file") from None


SECRET_WORDS = ("key", "token", "secret", "password")
MAX_SHOWN_INPUT = 60


def _has_path(tree: Any, loc: tuple) -> bool:
    """Whether the nested dict `tree` holds `loc` (or a prefix of it given as one raw value)."""
    node = tree
    for part in loc:
        if not isinstance(node, dict):
            return True
        if str(part) not in node:
            return False
        node = node[str(part)]
    return True


def _env_name(loc: tuple) -> str:
    """The environment variable that sets `loc` (or the shortest prefix of it that is set)."""
    for n in range(1, len(loc) + 1):
        name = ENV_PREFIX + NESTED_DELIMITER.join(str(p) for p in loc[:n]).upper()
        if name in {k.upper() for k in os.environ}:
            return name
    return ENV_PREFIX + NESTED_DELIMITER.join(str(p) for p in loc).upper()


def _shown_input(loc: tuple, given: Any) -> str:
    if any(word in str(part).lower() for part in loc for word in SECRET_WORDS):
        return ""
    if isinstance(given, (dict, list)):
        return ""
    text = repr(given)
    return f", got {text[:MAX_SHOWN_INPUT] + '...' if len(text) > MAX_SHOWN_INPUT else text}"


def _describe_invalid(exc: ValidationError, flags: dict[str, Any], toml: dict[str, Any], path: Path | None) -> str:
    """One line per bad setting: its dotted name, where it came from (flag, environment variable or
    file) and what is wrong; values of secret-looking keys are never shown."""
    env = _env_layer()
    lines = []
    for error in exc.errors():
        loc = tuple(p for p in error["loc"] if p != "__root__")
        dotted = ".".join(str(p) for p in loc) or "settings"
        if _has_path(flags, loc):
            where = "command-line flag"
        elif _has_path(env, loc):
            where = f"environment variable {_env_name(loc)}"
        elif path is not None and _has_path(toml, loc):
            where = f"config file {path}"
        else:
            where = "settings"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown setting (check the spelling; `crl config` lists them all)"
        lines.append(f"{dotted} ({where}): {message}{_shown_input(loc, error.get('input'))}")
    head = "invalid setting" if len(lines) == 1 else f"{len(lines)} invalid settings"
    return f"{head}: {lines[0]}" + "".join(f"\n  {line}" for line in lines[1:])


def _is_complex(parts: list[str]) -> bool:
    """Whether the setting at `parts` is a section or a list (its environment value is JSON)."""
    model: Any = Settings
    annotation: Any = None
    for part in parts:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return False
        annotation = fields[part].annotation
        model = annotation
    options = [annotation, *get_args(annotation)] if get_origin(annotation) in (Union, UnionType) else [annotation]
    return any(
        (isinstance(a, type) and issubclass(a, BaseModel)) or get_origin(a) in (list, dict, tuple, set) for a in options
    )


def _describe_unparsable_env() -> str:
    """Which `CRL_*` variables hold a value that is not the JSON a list or section needs."""
    bad = []
    for name, raw in sorted(os.environ.items()):
        if not name.upper().startswith(ENV_PREFIX) or name.upper() == ENV_PREFIX + "CONFIG":
            continue
        parts = name[len(ENV_PREFIX) :].lower().split(NESTED_DELIMITER)
        if not _is_complex(parts):
            continue
        try:
            json.loads(raw)
        except ValueError:
            bad.append(name)
    named = ", ".join(bad) if bad else "a CRL_* variable"
    return (
        f"environment variable {named}: cannot read its value; a list or a whole section is written "
        """as JSON, e.g. CRL_AGENT__TOOLS='["pkg.mod:fn"]' or CRL_LLM='{"model": "m"}'"""
    )


def _env_layer() -> dict[str, Any]:
    """`CRL_*` variables as a nested dict of raw strings (names lower-cased)."""
    out: dict[str, Any] = {}
    for name, value in os.environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        parts = name[len(ENV_PREFIX) :].lower().split(NESTED_DELIMITER)
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = value
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def explain_settings(
    settings: Settings, overrides: dict[str, Any] | None = None, config_file: str | Path | None = None
) -> list[tuple[str, Any, str]]:
    """Each effective value as `(dotted.name, value, source)`, secrets masked.

    The source is one of `default`, the TOML file's path, `env CRL_...` or `flag`.
    """
    path = config_file_path(config_file)
    toml_keys = set(_flatten(_toml_layer(path)))
    env_keys = set(_flatten(_env_layer()))
    flag_keys = set(_flatten(overrides or {}))
    rows = []
    for key, value in _flatten(settings.model_dump()).items():
        if key in flag_keys:
            source = "flag"
        elif key in env_keys:
            source = "env " + ENV_PREFIX + key.upper().replace(".", NESTED_DELIMITER)
        elif key in toml_keys:
            source = str(path)
        else:
            source = "default"
        if isinstance(value, SecretStr):
            value = MASK if value.get_secret_value() else ""
        elif isinstance(value, Path):
            value = redact_text(str(value))
        elif isinstance(value, str):
            value = MASK if value and is_secret_key(key.rpartition(".")[2]) else redact_text(value)
        elif isinstance(value, list):
            value = redact_settings(value)
        rows.append((key, value, source))
    return rows

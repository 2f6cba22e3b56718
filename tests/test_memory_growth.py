"""Long runs stay bounded in memory (docs/notes/memory-growth.md).

The cause measured: on CPU, bf16 matmuls go through oneDNN, which compiles and keeps a kernel
per distinct shape, so prompts of ever-new lengths grew a run's memory ~2 MB per model call.
The fix pads prompts to a multiple of `PAD_MULTIPLE` tokens; these tests hold it there, and
check that a long scripted run leaves no per-step records behind.
"""

from __future__ import annotations

import gc

import pytest

from bench.memory_growth import Sample, judge
from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.base import GenerationConfig
from crl.agent.llm.local import PAD_MULTIPLE, _left_pad, padded_width
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.trajectory import Episode, Step
from crl.tasks.registry import get_task


def _live(kind: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def test_padded_width_rounds_up_to_the_multiple():
    assert [padded_width(n) for n in (1, 31, 32, 33, 300)] == [32, 32, 32, 64, 320]
    assert padded_width(300, 1) == 300
    assert padded_width(5, 0) == 5


def test_left_pad_pads_to_the_multiple_on_the_left():
    ids, mask = _left_pad([[5, 6, 7], [9]], pad_id=0, multiple=4)
    assert ids.tolist() == [[0, 5, 6, 7], [0, 0, 0, 9]]
    assert mask.tolist() == [[0, 1, 1, 1], [0, 0, 0, 1]]


def test_the_bench_verdict_compares_after_the_warm_up_with_its_end():
    samples = [Sample(0, 0, 700), Sample(50, 1, 1000), Sample(100, 2, 1100), Sample(500, 9, 1150)]
    verdict = judge(samples, 500)
    assert (verdict.base_mb, verdict.max_after_mb, verdict.flat) == (1000, 1150, True)
    assert verdict.growth == pytest.approx(0.15)
    grown = judge(samples[:-1] + [Sample(500, 9, 1300)], 500)
    assert not grown.flat and "NOT flat" in grown.line()
    with pytest.raises(ValueError, match="sample more often"):
        judge([Sample(100, 2, 700), Sample(500, 9, 800)], 500)


def test_a_long_scripted_run_leaves_no_step_records_behind(crl_home):
    settings = load_settings(
        {"home": str(crl_home), "agent": {"policy": "posterior", "parallel": 4}, "memory": {"enabled": False}}
    )
    model = ScriptedModel(lambda messages: "Action: look")
    before_steps, before_episodes = _live(Step), _live(Episode)
    peak: list[tuple[int, int]] = []

    class Watch:
        done = 0

        def episode_done(self, episode) -> None:
            self.done += 1
            if self.done % 4 == 0:  # a heap walk per episode was most of this test's time in the full suite
                peak.append((_live(Step), _live(Episode)))

        def steps_done(self, n: int) -> None:
            pass

    result = start_run(settings, "keyroom/key", 24, fold="dev", kind="eval", model=model, progress=Watch())
    played = sum(len(e.steps) for e in result.episodes)
    assert len(result.episodes) == 24 and played >= 24 and len(peak) == 6
    steps_alive, episodes_alive = max(peak)
    # the run's own records (its episodes, and the four in play) and nothing more
    assert steps_alive - before_steps <= played + 4 * get_task("keyroom/key").max_steps
    assert episodes_alive - before_episodes <= 24 + 4
    del result
    assert _live(Step) == before_steps
    assert _live(Episode) == before_episodes


@pytest.mark.slow
def test_prompts_of_many_lengths_reach_the_model_in_few_widths(embedded_models_dir):
    from crl.agent.llm.local import LocalChatModel

    chat = LocalChatModel.embedded(embedded_models_dir, device="cpu", dtype="bf16")
    assert chat.pad_multiple == PAD_MULTIPLE
    widths: list[int] = []

    def record(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        if ids is not None and ids.shape[1] > 1 and mask is not None and mask.shape[1] == ids.shape[1]:
            widths.append(ids.shape[1])  # a prefill: the prompt pass, not a decode or candidate pass

    handle = chat.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        prompts = [
            [
                {"role": "user", "content": "You are in the hall." + " A lamp glows." * i},
                {"role": "assistant", "content": "Action:"},
            ]
            for i in range(0, 40, 2)
        ]
        lengths = {chat.count_tokens(p) for p in prompts}
        for p in prompts:
            chat.score_actions([p], [["look", "go north", "take brass key"]])
        chat.generate(prompts[:3], GenerationConfig(max_new_tokens=2, temperature=0))
    finally:
        handle.remove()
        chat.close()
    assert len(lengths) == len(prompts), "the prompts have distinct lengths"
    assert widths and all(w % PAD_MULTIPLE == 0 for w in widths)
    span = max(lengths) - min(lengths)
    assert len(set(widths)) <= span // PAD_MULTIPLE + 2 < len(lengths)

"""One local training at a time per machine (finetune/train_slot.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from filelock import FileLock, Timeout

from crl.finetune.train_slot import return_freed_memory, training_slot

HOLDER = """
import sys, time
from pathlib import Path
from filelock import FileLock
path = Path(sys.argv[1])
lock = FileLock(str(path), thread_local=False)
lock.acquire()
path.with_suffix(".owner").write_text("pid 4242 on elsewhere\\n")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_second_training_waits_for_the_one_holding_the_slot_and_says_for_whom(tmp_path):
    path = tmp_path / "train.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "1.5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    told: list[str] = []
    started = time.monotonic()
    with training_slot(True, path, on_wait=told.append, poll_s=0.05):
        waited = time.monotonic() - started
    holder.wait()
    assert waited > 1.0  # the holder kept the slot 1.5 s after saying so
    assert len(told) == 1 and "pid 4242 on elsewhere" in told[0] and "one_at_a_time" in told[0]


def test_a_free_slot_is_taken_at_once_held_for_the_body_and_released_after_it(tmp_path):
    path = tmp_path / "train.lock"
    told: list[str] = []
    with training_slot(True, path, on_wait=told.append):
        with pytest.raises(Timeout):
            FileLock(str(path), thread_local=False).acquire(timeout=0)
        assert "pid" in path.with_suffix(".owner").read_text()
    assert told == []
    FileLock(str(path), thread_local=False).acquire(timeout=0)


def test_turned_off_it_holds_nothing(tmp_path):
    path = tmp_path / "train.lock"
    other = FileLock(str(path), thread_local=False)
    other.acquire()
    with training_slot(False, path, on_wait=lambda m: pytest.fail(m)):
        pass
    other.release()


def test_run_training_trains_inside_the_slot_unless_the_config_says_otherwise(tmp_path, monkeypatch):
    from crl.finetune import train as train_mod
    from crl.finetune.config import FinetuneConfig

    path = tmp_path / "train.lock"
    monkeypatch.setattr("crl.finetune.train_slot.lock_path", lambda: path)
    held: list[bool] = []

    def fake_train(job, work_dir, resume, stop_after_steps, progress):
        try:
            FileLock(str(path), thread_local=False).acquire(timeout=0)
            held.append(False)
        except Timeout:
            held.append(True)

    monkeypatch.setattr(train_mod, "_train", fake_train)
    trimmed: list[bool] = []
    monkeypatch.setattr("crl.finetune.train_slot.return_freed_memory", lambda: trimmed.append(True))
    for one_at_a_time in (True, False):
        config = FinetuneConfig(one_at_a_time=one_at_a_time).model_dump()
        job = train_mod.TrainJob("job", "sft", str(tmp_path), "base", str(tmp_path), config)
        train_mod.run_training(job, tmp_path / f"work-{one_at_a_time}")
    assert held == [True, False] and trimmed == [True, True]


def _rss_mb() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_goes_back_to_the_os_after_a_training():
    chunks = [bytes(4096) for _ in range(100_000)]
    kept = chunks[::50]  # scattered survivors keep the heap from shrinking by itself
    del chunks
    held = _rss_mb()
    assert return_freed_memory()
    assert _rss_mb() < held - 200 and len(kept) == 2000

"""Pages read straight from the store (`memory.storage.paged`), as the studio serves them before
it has listed a large bank: the same records in the same order as `ExperienceBank.ls`, for every
filter and sort it serves, on a real embedded Chroma bank (hashing embeddings) of 420 episodes
from really played keyroom games (and the steps of 12 more), with tiers mixed by curation and
keys tied (uses are small integers; a third of the values are 0.5)."""

from __future__ import annotations

import json
import random

import pytest

from bench.memory_bench import play_keyroom
from bench.studio_bench import DIM, clones, template_records
from crl.agent.studio import memory_view
from crl.agent.studio.memory_view import MemoryView, RecordFilter
from crl.memory.bank import ExperienceBank
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.paged import PageQuery, Pager, pageable

N = 420


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    work = tmp_path_factory.mktemp("paged")
    records = clones(template_records(work), N, seed=3)
    rng = random.Random(5)
    for r in records:
        if rng.random() < 0.33:
            r["value"] = 0.5
    path = work / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    bank = ExperienceBank(work / "memory", runs_dir=work / "runs", embedder=HashingEmbedding(DIM))
    bank.import_file(path)
    for episode in play_keyroom(12):  # played episodes bring their steps
        bank.ingest_episode(episode)
    ids = [r["id"] for r in records]
    rng.shuffle(ids)
    bank.release(ids[: N * 3 // 4])
    bank.pin(ids[N * 3 // 4 : N * 7 // 8])  # the last eighth stays quarantined
    yield bank
    bank.close()


QUERIES = [
    PageQuery(),
    PageQuery(sort="value"),
    PageQuery(sort="use"),
    PageQuery(sort="utility"),
    PageQuery(outcome="success", sort="value"),
    PageQuery(outcome="failure"),
    PageQuery(tier="golden", sort="utility"),
    PageQuery(tier="regular", outcome="failure", sort="use"),
    PageQuery(tier="quarantine"),
    PageQuery(family="keyroom", outcome="success", sort="use"),
    PageQuery(kind="step", sort="value"),
    PageQuery(kind="step", outcome="success", tier="regular"),
    PageQuery(family="nosuch"),
]


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.kind}-{q.family}-{q.outcome}-{q.tier}-{q.sort}")
def test_a_page_from_the_store_is_the_slice_of_ls(bank, q):
    listed = bank.ls(q.kind, family=q.family, variant=q.variant, outcome=q.outcome, tier=q.tier, sort=q.sort)
    pager = Pager(bank.view)
    for page, per_page in ((1, 10), (1, 50), (3, 20), (2, 200)):
        rows, total = pager.page(q, page, per_page)
        assert total == len(listed)
        assert [r.id for r in rows] == [r.id for r in listed[(page - 1) * per_page : page * per_page]], (page, per_page)
    if q.family != "nosuch":
        assert total > 0


def test_the_bar_keeps_reads_small_on_a_large_share(bank, monkeypatch):
    """The first page of 10 by recency reads a few dozen records, not the 432; so does a page
    of a sort on which every record ties."""
    pager = Pager(bank.view)
    read = []
    real = Pager._read

    def counted(self, q, sources, bar):
        out = real(self, q, sources, bar)
        read.append(len(out))
        return out

    monkeypatch.setattr(Pager, "_read", counted)
    rows, total = pager.page(PageQuery(), 1, 10)
    assert total == N + 12 and len(rows) == 10 and sum(read) < 60

    utilities = {r.utility for r in bank.ls("episode")}
    assert len(utilities) == 1  # every record's utility is the fresh one: the whole bank ties
    tied = []
    real_tied = Pager._tied
    monkeypatch.setattr(Pager, "_tied", lambda self, *a: tied.append(a[-1]) or real_tied(self, *a))
    read.clear()
    rows, _ = pager.page(PageQuery(sort="utility"), 2, 10)
    assert [r.id for r in rows] == [r.id for r in bank.ls("episode", sort="utility")[10:20]]
    assert tied == [20] and sum(read) < 60  # the tie's ids were read, then only the 20 records needed


def test_counts_are_kept_until_the_stamp_changes(bank, monkeypatch):
    pager = Pager(bank.view)
    calls = []
    real = Pager.ids
    monkeypatch.setattr(
        Pager, "ids", staticmethod(lambda col, where, limit=None: calls.append(limit) or real(col, where, limit))
    )
    q = PageQuery(outcome="failure", tier="golden")
    pager.page(q, 1, 5, stamp=1)
    counted = calls.count(None)
    calls.clear()
    pager.page(q, 1, 5, stamp=1)
    assert calls.count(None) == 0 < counted  # the matching counts came from the cache
    pager.page(q, 1, 5, stamp=2)
    assert calls.count(None) == counted


def test_what_the_store_cannot_filter_goes_to_the_listing(bank, monkeypatch):
    assert pageable("episode", "recency") and pageable("step", "use")
    for args in (("episode", "last_used"), ("rule", "recency")):
        assert not pageable(*args)
    assert not pageable("episode", "value", source="imported")
    assert not pageable("episode", "value", tag="reviewed") and not pageable("episode", "value", skill="key")

    view = MemoryView(bank, 400)
    flt = RecordFilter(outcome="success", tier="regular")
    before = view.page(flt, "value", 2, 25)
    assert before["listed_from"] == "store" and not view.listings.ready("episode")
    monkeypatch.setattr(memory_view, "STORE_DEPTH", 49)
    assert view.page(flt, "value", 1, 25)["listed_from"] == "store"
    assert view.page(RecordFilter(kind="step"), "use", 2, 25)["listed_from"] == "listing"  # deeper: the listing
    assert view.listings.ready("step") and not view.listings.ready("episode")
    tagged = view.page(RecordFilter(tag="reviewed"), "recent", 1, 25)  # a tag: only the listing knows
    assert tagged["listed_from"] == "listing" and view.listings.ready("episode")
    after = view.page(flt, "value", 2, 25)
    assert after["listed_from"] == "listing" and after["rows"] == before["rows"] and after["total"] == before["total"]
    assert {r["id"] for r in tagged["rows"]} == {r.id for r in bank.ls("episode", tag="reviewed")[:25]}


def test_the_listing_scan_reads_what_ls_reads(bank):
    for kind in ("episode", "step", "rule"):
        scanned = {r.id: r for r in Pager(bank.view).records(kind, chunk=64)}
        assert scanned == {r.id: r for r in bank.ls(kind)}

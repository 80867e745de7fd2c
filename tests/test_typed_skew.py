"""summary.json's ``skew`` as the typed value (distprof.sections.skew.Skew): every golden's section and
fresh merges of real jobs (a named straggler, a pipeline) decode and write back the same JSON, key
order included, and read by attribute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distprof import config as config_mod
from distprof.cli import merge_files
from distprof.sections.skew import Pipeline, Skew, StragglerRow
from distprof.typed import ABSENT, JsonError

DATA = Path(__file__).parent / "data"
GOLDENS = sorted(path for path in (DATA / "golden").glob("*.json") if "skew" in json.loads(path.read_text()))


def _round_trip(section: dict) -> Skew:
    decoded = Skew.from_json(section, "$.skew")
    assert decoded.to_json() == section
    assert json.dumps(decoded.to_json()) == json.dumps(section)
    return decoded


def _merged_skew(folder: str) -> dict:
    paths = sorted((DATA / folder).glob("*.json.gz"))
    return json.loads(json.dumps(merge_files(paths, config_mod.load(None))))["skew"]


def test_there_are_goldens_with_a_skew_section() -> None:
    assert len(GOLDENS) >= 5


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda path: path.stem)
def test_every_golden_skew_round_trips(golden: Path) -> None:
    section = json.loads(golden.read_text())["skew"]
    skew = _round_trip(section)
    assert skew.matched == section["matched"]
    assert skew.aligned is section["aligned"]
    assert [row.rank for row in skew.alignment] == [row["rank"] for row in section["alignment"]]
    assert [row.waits_caused_ns for row in skew.ranks] == [row["waits_caused_ns"] for row in section["ranks"]]
    for kind, raw in zip(skew.kinds, section["kinds"]):
        assert kind.arrival_skew_ns.p90 == raw["arrival_skew_ns"]["p90"]
        assert kind.wait_ns_by_rank == {int(rank): value for rank, value in raw["wait_ns_by_rank"].items()}
    if section["steps_summary"] is not None:
        assert skew.steps_summary.duration_median_ns == section["steps_summary"]["duration_median_ns"]
    assert skew.note_templates is ABSENT or skew.note_templates == section["note_templates"]


def test_the_unconfirmed_straggler_reads_with_its_saving() -> None:
    """torch_flops's late rank is named by its waits but priced under the floor: the row carries
    saving_ns, share and floor, not the priced row's cost_why_not and durations_vary_share."""
    section = _merged_skew("torch_flops")
    skew = _round_trip(section)
    assert skew.straggler is None
    row = skew.unconfirmed_straggler
    assert isinstance(row, StragglerRow)
    assert row.rank == section["unconfirmed_straggler"]["rank"]
    assert row.floor == section["unconfirmed_straggler"]["floor"]
    assert row.cost_why_not is ABSENT and row.durations_vary_share is ABSENT


def test_a_merged_pipeline_with_a_straggler_round_trips() -> None:
    """torch_pp/late1: a 4-stage pipeline with rank 1 late, the keys the goldens lack (a priced
    straggler row, pipelines' stages)."""
    section = _merged_skew("torch_pp/late1")
    skew = _round_trip(section)
    row = skew.straggler
    assert isinstance(row, StragglerRow)
    assert row.rank == section["straggler"]["rank"] == 1
    assert row.exposed_waits_ns_by_rank == {int(rank): value for rank, value in
                                            section["straggler"]["exposed_waits_ns_by_rank"].items()}
    assert row.saving_ns is ABSENT and "cost_why_not" in section["straggler"]
    assert skew.unconfirmed_straggler is ABSENT
    assert len(skew.pipelines) == 1 and isinstance(skew.pipelines[0], Pipeline)
    assert [stage.bubble_ns for stage in skew.pipelines[0].stages] == \
        [stage["bubble_ns"] for stage in section["pipelines"][0]["stages"]]


def test_a_merged_tp_dp_job_round_trips() -> None:
    section = _merged_skew("torch_tpdp/late3")
    skew = _round_trip(section)
    assert skew.straggler.rank == section["straggler"]["rank"]
    assert [row.group_ranks for row in skew.collectives] == \
        [row["group_ranks"] for row in section["collectives"]]
    assert skew.collectives_shown == section["collectives_shown"]


def test_an_unknown_key_says_where() -> None:
    section = json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text())["skew"]
    damaged = {**section, "kinds": [{**section["kinds"][0], "bogus": 1}]}
    with pytest.raises(JsonError, match=r"\$\.skew\.kinds\[0\].*bogus"):
        Skew.from_json(damaged, "$.skew")

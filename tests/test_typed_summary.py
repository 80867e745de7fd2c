"""summary.json is one typed value: ``Summary.from_json(j).to_json() == j``, key order included, for
every golden and for a fresh merge of each source kind (native, nsys, Kineto GPU and CPU-only,
TP x DP groups, a pipeline); the merge writes exactly what the typed value writes; bad content is a
one-line error naming where it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nsys_fixtures import real_export

from distprof import Summary
from distprof import config as config_mod
from distprof.cli import merge_files
from distprof.typed import JsonError

DATA = Path(__file__).resolve().parent / "data"
GOLDENS = sorted((DATA / "golden").glob("*.json"))


def _round_trip(summary: dict) -> None:
    typed = Summary.from_json(summary)
    assert json.dumps(typed.to_json()) == json.dumps(summary)   # same keys, values and order


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_every_golden_round_trips(golden: Path) -> None:
    _round_trip(json.loads(golden.read_text()))


FRESH = {
    "native": lambda: sorted((DATA / "demo_ranks").glob("rank*.sqlite")),
    "nsys": lambda: [real_export("nsysai_h100_2gpu_1s.sqlite")],
    "kineto_gpu": lambda: sorted((DATA / "kineto_h100" / "gloo_cuda").glob("*.json.gz")),
    "tp_dp": lambda: sorted((DATA / "torch_tpdp" / "late3").glob("*.json.gz")),
    "pipeline": lambda: sorted((DATA / "torch_pp" / "late1").glob("*.json.gz")),
    "ddp_late": lambda: sorted((DATA / "torch_ddp" / "late").glob("*.json.gz")),
}


@pytest.mark.parametrize("kind", sorted(FRESH))
def test_a_fresh_merge_round_trips(kind: str) -> None:
    """The merge's summary.json content (JSON, as written) reads back into the same typed value."""
    summary = json.loads(json.dumps(merge_files(FRESH[kind](), config_mod.load(None))))
    _round_trip(summary)
    typed = Summary.from_json(summary)
    assert [r.rank for r in typed.ranks] == [row["rank"] for row in summary["ranks"]]
    assert typed.ranks[0].figures.window_ns == summary["ranks"][0]["window_ns"]
    assert typed.skew.matched == summary["skew"]["matched"]
    assert [f.finding for f in typed.findings] == [f["finding"] for f in summary["findings"]]
    assert [f.message for f in typed.findings] == [f["template"] for f in summary["findings"]]


def test_attribute_reads_match_the_file() -> None:
    """Reading by attribute gives the file's values; rank-keyed maps come back with int keys."""
    summary = json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text())
    typed = Summary.from_json(summary)
    assert typed.world_size == summary["world_size"]
    assert typed.rank(1).figures.communication_ns == summary["ranks"][1]["communication_ns"]
    assert typed.rank(1).lanes[0].label == summary["ranks"][1]["lanes"][0]["lane"]
    kinds = typed.skew.kinds[0]
    assert kinds.wait_ns_by_rank == {int(k): v for k, v in summary["skew"]["kinds"][0]["wait_ns_by_rank"].items()}


@pytest.mark.parametrize(("change", "said"), [
    (lambda s: s.update(surprise=1), "$: unknown key 'surprise'"),
    (lambda s: s["skew"].update(matchd=3), "$.skew: unknown key 'matchd'"),
    (lambda s: s.pop("world_size"), "$: missing key 'world_size'"),
    (lambda s: s.update(ranks={}), "$.ranks: expected a list"),
    (lambda s: s["ranks"][0].pop("lanes"), "$.ranks[0]: a rank row without 'lanes'"),
    (lambda s: s["skew"]["kinds"][0].pop("name"), "$.skew.kinds[0]: missing key 'name'"),
    (lambda s: s["critical_path"]["steps"][1]["segments"][3].pop("lane"),
     "$.critical_path.steps[1].segments[3]: missing key 'lane'"),
    (lambda s: s["tables"]["by_rank"][2]["device"][0].update(extra=1), "$.tables.by_rank[2].device[0]: unknown key"),
    # every leaf has its type (issue 57): a text, an object, a bool or null where a number belongs, and the rest
    (lambda s: s["ranks"][0].update(window_ns="12"), "$.ranks[0].window_ns: expected int, got str"),
    (lambda s: s["ranks"][0].update(clock_offset_ns=True), "$.ranks[0].clock_offset_ns: expected int, got bool"),
    (lambda s: s["ranks"][1]["lanes"][0].update(lane=3), "$.ranks[1].lanes[0].lane: expected str, got int"),
    (lambda s: s["skew"]["kinds"][0].update(matched={}), "$.skew.kinds[0].matched: expected int, got dict"),
    (lambda s: s["skew"]["kinds"][0]["wait_ns_by_rank"].update(x=1),
     "$.skew.kinds[0].wait_ns_by_rank.x: expected an int key, got 'x'"),
    (lambda s: s["tables"]["merged"]["overview"][0].update(side=-1),
     "$.tables.merged.overview[0].side: expected str, got int"),
    (lambda s: s["tables"]["merged"]["overview"][0].update(ratio=[]),
     "$.tables.merged.overview[0].ratio: expected float or null, got list"),
    (lambda s: s["findings"].append(None), "$.findings[0]: expected an object for Finding, got null"),
    (lambda s: s["checks"][0].update(message=None), "$.checks[0].message: expected str or a reason, got null"),
    # and what the reports rely on beyond the types
    (lambda s: s["tables"]["merged"]["steps"]["median_ns"].pop(),
     "$.tables.merged.steps.median_ns: 3 item(s), not one per item of $.tables.merged.steps.step (4)"),
    (lambda s: s["tables"]["ranks"].reverse(), "$.tables.ranks: [2, 1, 0] are not the ranks of $.tables.by_rank"),
    (lambda s: s["tables"]["merged"]["model"][1]["cpu_total_ns_by_rank"].pop(),
     "$.tables.merged.model[1].cpu_total_ns_by_rank: 2 item(s), not one per item of $.tables.merged.model[1].ranks"),
    (lambda s: s["ranks"][1].update(rank=0), "$.ranks[1].rank: rank 0 has two rows"),
])
def test_content_that_does_not_fit_says_where(change, said: str) -> None:
    summary = json.loads((DATA / "golden" / "demo__demo_ranks.json").read_text())
    change(summary)
    with pytest.raises(JsonError) as error:
        Summary.from_json(summary)
    assert str(error.value).startswith(said)

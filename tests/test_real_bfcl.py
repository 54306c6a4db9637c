"""Real data: BFCL from ../shared beside a slice of MMLU-Pro in one registry (skipped where absent).

Both are imported through the CLI with id prefixes and `--meta dataset=...`; the per-dataset view must
select exactly one dataset's models and queries, and the scorecard's raw-evidence figures on BFCL must
be the ones issue 16 reports (the raw nearest neighbour shares the family for 28 of 71 models and is
the base_model sibling for 5 of 38).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from helpers import mmlu_pro_slice
from tests.conftest import MMLU_PRO, SHARED

BFCL = SHARED / "data" / "bfcl"
SMALL = "all-MiniLM-L6-v2"


@pytest.fixture
def bfcl() -> Path:
    if not (BFCL / "evals.csv").is_file():
        pytest.skip(f"real data not found at {BFCL} (../shared/data/bfcl beside the project)")
    return BFCL


def _run(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.stdout if "--json" in map(str, args) else result.output  # JSON on stdout, warnings on stderr


def test_bfcl_and_mmlu_pro_share_a_registry_and_keep_their_views(bfcl, tmp_path):
    if not (MMLU_PRO / "evals.csv").is_file():
        pytest.skip(f"real data not found at {MMLU_PRO}")
    home = tmp_path / "home"
    vectors = bfcl / "query_embeddings"
    report = json.loads(_run("--home", home, "import", bfcl, "--id-prefix", "bfcl:", "--meta", "dataset=bfcl",
                             "--encoder", SMALL, "--query-embeddings", vectors / f"{SMALL}.npy",
                             "--query-ids", vectors / f"{SMALL}_ids.npy", "--json"))
    assert (report["new_models"], report["new_queries"], report["new_evaluations"]) == (71, 1460, 103_660)
    assert report["stored_precomputed"] == 1460 and report["encoded_texts"] == 0
    n_mmlu = mmlu_pro_slice(MMLU_PRO, tmp_path / "mmlu", 150)
    _run("--home", home, "import", tmp_path / "mmlu", "--id-prefix", "mmlu-pro:", "--meta", "dataset=mmlu-pro",
         "--encoder", SMALL, "--query-embeddings", tmp_path / "mmlu" / "v.npy", "--query-ids", tmp_path / "mmlu" / "i.npy")
    stats = json.loads(_run("--home", home, "stats", "--json"))
    assert stats["n_models"] == 103 and stats["n_queries"] == 1460 + 150
    assert stats["n_evaluations"] == 103_660 + n_mmlu

    with open(bfcl / "models.csv", encoding="utf-8", newline="") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    listed = json.loads(_run("--home", home, "models", "list", "--where", "dataset == bfcl", "--json"))
    assert sorted(m["name"] for m in listed) == sorted(rows)
    one = next(m for m in listed if m["name"] == "gpt-4o-2024-05-13-FC")
    assert one["family"] == rows[one["name"]]["family"] and one["access"] == rows[one["name"]]["access"]
    assert one["extra"]["base_model"] == "gpt-4o-2024-05-13" and one["extra"]["mode"] == "fc"
    fc_open = json.loads(_run("--home", home, "models", "list", "--where", "dataset == bfcl and mode == fc and "
                              "access == open", "--json"))
    assert {m["name"] for m in fc_open} == {n for n, r in rows.items() if r["mode"] == "fc" and r["access"] == "open"}
    assert len(json.loads(_run("--home", home, "models", "list", "--where", "dataset == mmlu-pro", "--json"))) == 32

    # the per-dataset view reads only its own queries, and the raw evidence gives the figures
    from registry import Registry
    from registry.catalog.dataset import load_eval_data
    from registry.lab.geometry import disagreement_matrix, nn_shares_label, sibling_rate

    reg = Registry.open(home, create=False)
    view = reg.list("dataset == bfcl")
    data = load_eval_data(reg.store, SMALL, models=[r.name for r in view])
    assert data.n_queries == 1460 and all(q.startswith("bfcl:") for q in data.query_ids)
    assert len(data.scores) == 103_660
    raw, common = disagreement_matrix(data.dense())
    assert common.min() == 1460  # the BFCL matrix is full
    families = [r.family for r in view]
    assert nn_shares_label(raw, families) == 28
    assert sibling_rate(raw, [r.metadata()["base_model"] for r in view]) == (5, 38)

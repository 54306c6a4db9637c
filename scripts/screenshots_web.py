"""Screenshots of every page of the web UI (`registry serve`) on the demo home, for docs/ui/.

    .venv/bin/python scripts/screenshots_web.py [--home ./locus-demo] [--out docs/ui]

Builds the demo home first when HOME holds no registry (`registry --home HOME demo`, about half a
minute), starts `registry serve` on a free loopback port, opens each page in Debian's headless
Chromium (Playwright, /usr/bin/chromium), waits for its /v1 calls, and saves one PNG per page:
models.png, model.png (the first model the audit flags), map.png, families.png, portfolio.png, add.png (eight
queries suggested), audit.png, route.png (two of the
home's questions routed, a profile asked), compare.png (the flagged pair). docs/service.md's "Web UI" and the README show them.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(home: Path, env: dict, port: int) -> subprocess.Popen:
    """`registry serve` on HOME; returns once /v1/health answers."""
    import httpx

    server = subprocess.Popen([sys.executable, "-m", "cli.main", "--home", str(home), "serve", "--port", str(port),
                               "--log-level", "warning"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.terminate()
            raise SystemExit("registry serve did not come up")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path("locus-demo"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    args = parser.parse_args()
    if not Path(CHROMIUM).is_file():
        sys.exit(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("LOCUS_TOKEN", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if not (args.home / "config.json").is_file():
        print(f"building the demo home in {args.home} (registry demo) ...", flush=True)
        subprocess.run([sys.executable, "-m", "cli.main", "--home", str(args.home), "demo"], cwd=ROOT, env=env,
                       check=True, stdout=subprocess.DEVNULL)
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(args.home.resolve(), env, port)
    try:
        import httpx

        with httpx.Client(base_url=base, timeout=300) as c:
            flags = c.get("/v1/audit").json()["flags"]
            names = [m["name"] for m in c.get("/v1/models").json()]
            a, b = (flags[0]["a"], flags[0]["b"]) if flags else (names[0], names[1])
        from registry import Registry

        texts = Registry.open(args.home, create=False).store.read("queries", ["text"]).column("text").to_pylist()
        questions = [texts[0], texts[len(texts) // 2]]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 860}, base_url=base)
            problems: list[str] = []
            page.on("console", lambda m: m.type == "error" and problems.append(m.text))
            page.on("pageerror", lambda e: problems.append(str(e)))

            def shot(name: str, path: str, ready: str, then=None, full: bool = True) -> None:
                page.goto(path)
                page.wait_for_selector(ready, timeout=120_000)
                if then is not None:
                    then()
                page.wait_for_load_state("networkidle")
                target = args.out / f"{name}.png"
                page.screenshot(path=str(target), full_page=full)
                print(f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: {base}{path}")

            def route() -> None:
                page.get_by_label("Questions (one per line)").fill("\n".join(questions))
                page.get_by_role("button", name="Route").click()
                page.locator("#route-out ol").nth(1).wait_for(timeout=120_000)
                tasks = page.locator("#targets input")
                tasks.nth(0).fill("0.8")
                if tasks.count() > 1:
                    tasks.nth(1).fill("0.3")
                page.get_by_role("button", name="Find models").click()
                page.locator("#profile-table tbody tr").first.wait_for(timeout=120_000)

            shot("models", "/", "#models-table tbody tr", full=False)
            shot("model", f"/model?name={quote(a)}", "#near-behaviour tbody tr")
            shot("map", "/map", "#map circle", full=False)
            shot("families", "/families", "#clusters-table tbody tr")
            shot("portfolio", "/portfolio", "#portfolio-table tbody tr")

            def suggest() -> None:
                page.get_by_label("Queries", exact=True).fill("8")
                page.get_by_role("button", name="Suggest").click()
                page.locator("#suggest-table tbody tr").first.wait_for(timeout=120_000)

            shot("add", "/add", "#suggest form", then=suggest)
            shot("audit", "/audit", "#calibration")
            shot("route", "/route", "#targets input", then=route)
            shot("compare", f"/compare?a={quote(a)}&b={quote(b)}", "#compare-table tbody tr")
            browser.close()
        if problems:
            sys.exit("console errors: " + "; ".join(problems))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()

"""In a real browser (Debian's headless Chromium, driven by Playwright): JupyterLab runs lab 1's notebook
through its live dashboard, and a slide deck opens with its title. Screenshots go to build/screenshots/.

Needs the apt package `chromium` (/usr/bin/chromium) and the pip package `playwright` (dev extra); never
a browser download. Without either the tests skip and say which is missing.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT
from labs.instruments import proctree

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / "build" / "screenshots"
pytestmark = [pytest.mark.slow, pytest.mark.exhaustive, pytest.mark.timeout(180)]  # CI's second tier

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None
if sync_playwright is None:
    pytestmark.append(pytest.mark.skip(reason="the pip package playwright is missing (pip install -e '.[dev]')"))
elif not CHROMIUM.exists():
    pytestmark.append(pytest.mark.skip(reason="no /usr/bin/chromium (Debian: apt-get install chromium)"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab on a port from the OS with a random token, serving a scratch folder holding a copy of
    lab 1's notebook (so running it in the browser never rewrites the committed one); its kernels run
    the reference (COURSE_TARGET=solutions). Afterwards: the server, its kernels and any run they
    started are ended, whatever happened."""
    port, token = free_port(), secrets.token_hex(16)
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(ROOT / "labs" / "lab1_baseline" / "lab1.ipynb", served / "lab1.ipynb")
    # Settings, workspaces and runtime files in tmp_path: nothing of a user's JupyterLab is read or changed;
    # no news fetching (nothing outside this machine is reached).
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    nb_settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    nb_settings.mkdir(parents=True)  # every cell in the page (no windowing): the cells we click exist;
    # and no "Select Kernel" dialog when the kernel list arrives after the notebook (it happens, 1 run in ~8)
    (nb_settings / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none", "autoStartDefaultKernel": true}')
    env = {**os.environ, "COURSE_TARGET": "solutions", "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
           f"--LabApp.user_settings_dir={tmp_path / 'settings'}", f"--LabApp.workspaces_dir={tmp_path / 'ws'}"]
    log = open(tmp_path / "jupyter.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 45
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "jupyter.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "JupyterLab did not answer in 45 s"
                time.sleep(0.3)
        yield url, token
    finally:
        # One SIGTERM to the server, its kernels and whatever they launched (the dashboard's runs live in
        # sessions of their own): the server shuts its kernels down, a kernel stops its runs; SIGKILL after 5 s.
        tree = proctree.end_tree(server.pid, grace_s=5.0, reap=server.poll, leader=True)
        server.wait()
        log.close()
        left = [p for p in tree if proctree.alive(p)]
        assert not left, f"left running after the test: {left}"


def test_lab1_dashboard_runs_live_in_jupyterlab(jupyterlab, browser):
    url, token = jupyterlab
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        run_lab1_to_the_dashboard(page, url, token)
    except Exception:
        page.screenshot(path=str(SHOTS / "lab1-failure.png"))  # what the browser showed when it failed
        raise


def run_lab1_to_the_dashboard(page, url, token):
    t0 = time.monotonic()
    # Should a kernel dialog come up anyway, answer it as a learner would: the notebook's own kernel.
    page.add_locator_handler(page.locator(".jp-Dialog"), lambda d: d.get_by_role("button", name="Select").click())
    page.goto(f"{url}/lab/tree/lab1.ipynb?token={token}")
    cells = page.locator(".jp-Notebook .jp-Cell")
    expect(cells.first).to_be_visible(timeout=30_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=30_000)
    # The cells up to the dashboard cell: select the one after it, then Run > Run All Above Selected Cell.
    # (From the file: the editor draws only the lines in view, so the page does not hold all the text.)
    notebook = json.loads((ROOT / "labs" / "lab1_baseline" / "lab1.ipynb").read_text())
    board_cell = next(i for i, c in enumerate(notebook["cells"]) if "launch(command(" in "".join(c["source"]))
    cells.nth(board_cell + 1).click()
    page.keyboard.press("Escape")  # command mode: the click may have entered the editor
    expect(cells.nth(board_cell + 1)).to_have_class(re.compile(r"\bjp-mod-active\b"))
    expect(page.locator(".jp-Notebook.jp-mod-commandMode")).to_have_count(1)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Above Selected Cell").click()
    expect(cells.nth(1).locator(".jp-InputPrompt")).to_contain_text(re.compile(r"\[(\*|\d+)\]"))  # queued
    board = page.locator(".course-dashboard")
    expect(board).to_be_visible(timeout=90_000)  # ~15 s on an idle 2-core machine: torch, data, one step
    plot, stop = board.locator("img.course-dashboard-plot"), board.locator("button.course-dashboard-stop")
    expect(stop).to_be_visible()
    expect(stop).to_be_enabled()
    # The first drawing with a curve in it: the status line gives the last logged step and its loss.
    expect(board).to_contain_text(re.compile(r"step \d+ \| loss"), timeout=40_000)
    expect(plot).to_be_visible(timeout=10_000)
    page.wait_for_function("el => el.complete && el.naturalWidth > 400", arg=plot.element_handle(), timeout=10_000)
    first = plot.get_attribute("src")
    step_then = int(re.search(r"step (\d+) \|", board.inner_text())[1])
    board.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(SHOTS / "lab1-dashboard-running.png"))
    expect(plot).not_to_have_attribute("src", first, timeout=20_000)  # redrawn as the log grows...
    assert int(re.search(r"step (\d+) \|", board.inner_text())[1]) > step_then  # ...with later steps
    box = plot.bounding_box()
    assert box and box["width"] > 400 and box["height"] > 100, box
    # The cell ends when the run does (run.wait()): the dashboard says so and disables Stop.
    expect(board).to_contain_text("finished", timeout=60_000)
    expect(stop).to_be_disabled()
    assert "step 150 |" in board.inner_text()
    board.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(SHOTS / "lab1-dashboard-finished.png"))
    print(f"notebook opened to dashboard finished: {time.monotonic() - t0:.1f} s")


def test_slide_deck_opens_with_its_title(browser, tmp_path):
    builder = ROOT / "slides" / "build.py"
    r = subprocess.run([sys.executable, str(builder), "--out", str(tmp_path), "--lab", "lab1"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    deck = tmp_path / "lab1.html"
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.goto(deck.as_uri())
    assert page.title().startswith("Lab 1 — "), page.title()
    h1 = page.locator("h1").first
    expect(h1).to_be_visible()
    assert h1.inner_text().startswith("Lab 1 — "), h1.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "slides-lab1.png"))


def test_class_report_page_shows_the_grid_and_the_spread(browser, tmp_path):
    """checker/class_html.py's page for a class of five, as an instructor opens it from disk."""
    from checker import class_html

    def check(name, passed, value, threshold, unit):
        return {"name": name, "passed": passed, "value": value, "threshold": threshold, "unit": unit,
                "message": f"{name}: measured {value}", "hint": ""}
    reports = {}
    for learner, speed, ok in [("ada", 0.97, True), ("bo", 0.62, False), ("cy", None, False), ("di", 0.91, True),
                               ("ed", 0.84, True)]:
        reports[learner] = {"passed": ok and speed is not None, "sandbox": "sandboxed: the grade's runs in a bwrap",
                            "checks": [check("throughput", bool(speed and speed >= 0.8), speed, 0.8, "x ref"),
                                       check("reproducible", ok, 0.0 if ok else 3e-3, 0.0, "max abs diff")]}
    path = tmp_path / "class.html"
    path.write_text(class_html.page("lab1", 7, reports))
    page = browser.new_page(viewport={"width": 900, "height": 420})
    page.goto(path.as_uri())
    expect(page.locator("h1")).to_have_text("lab1: class report")
    assert page.locator("td.pass").count() == 6 and page.locator("td.fail").count() == 4
    assert page.locator("th.check svg").count() == 2 and page.locator("th.check circle").count() == 9
    cell = page.locator("tr", has_text="bo").locator("td.fail").first
    assert cell.get_attribute("title").startswith("0.62 x ref (threshold 0.8 x ref)")  # shown on hover
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "class-report.png"), full_page=True)

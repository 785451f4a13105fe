"""`testbed report`'s HTML in a real browser: headless Chromium (Debian's ``chromium``, installed by
scripts/setup.sh) loads report.html and finds no console message and no script error, every
image decoded and shown, and nothing wider than the window (wide tables scroll in their own box);
a screenshot is kept beside the report (``<results>/report/screenshot.png``) for a person to look
at.

No browser-driver dependency: a copy of the page gets a probe script that records errors and the
images' state into the DOM, which ``--dump-dom`` prints once the page has loaded; Chromium's own
console log (``--enable-logging=stderr``) is read as well. The reports are of the committed
fixtures (tests/fixtures), so the test needs no root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import cast

import pytest
from PIL import Image

from testbed.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"
# result sets kept beside results/ (the tests that load every set there keep their counts)
OTHER_FIXTURES = {"command_report": FIXTURES.parent / "command_report"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1280, 2400)

# Runs first in <head>: console.error calls, script errors and failed loads (an <img> that does
# not decode fires "error" on the element, caught in the capture phase), then on "load" the
# state of every image and the page's width, as JSON in <script id="browser-probe">.
PROBE = """<script>(function () {
  var errors = [];
  var original = console.error;
  console.error = function () {
    errors.push(Array.prototype.join.call(arguments, " "));
    return original.apply(console, arguments);
  };
  window.addEventListener("error", function (e) {
    var t = e.target;
    errors.push(t && t !== window && t.tagName ? "failed to load " + t.tagName + " " +
                (t.getAttribute("data-file") || "") : String(e.message));
  }, true);
  window.addEventListener("unhandledrejection", function (e) {
    errors.push("unhandled rejection: " + e.reason);
  });
  window.addEventListener("load", function () {
    var images = Array.prototype.map.call(document.images, function (i) {
      return {file: i.getAttribute("data-file"), alt: i.alt, complete: i.complete,
              width: i.naturalWidth, shown: i.getBoundingClientRect().width};
    });
    var out = document.createElement("script");
    out.type = "application/json";
    out.id = "browser-probe";
    out.textContent = JSON.stringify({errors: errors, images: images,
      scrollWidth: document.documentElement.scrollWidth,
      clientWidth: document.documentElement.clientWidth,
      headlines: document.querySelectorAll(".headline").length});
    document.body.appendChild(out);
  });
})();</script>"""

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium missing (scripts/setup.sh installs it)"
)


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a throwaway profile; ``--virtual-time-budget`` lets the page's load
    handlers run before it dumps or shoots."""
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars"]
    if os.geteuid() == 0:
        cmd.append("--no-sandbox")  # Chromium refuses to run as root inside its sandbox
    cmd += [f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    cmd += ["--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@needs_chromium
@pytest.mark.parametrize(
    ("name", "figures"),
    # command_report: a command workload's process timeline, two metric figures, the WAN timeline
    [("collectives", 3), ("training", 3), ("failure", 0), ("command_report", 4)],
)
def test_the_report_loads_in_a_browser_without_errors(
    tmp_path: Path, name: str, figures: int
) -> None:
    results = shutil.copytree(OTHER_FIXTURES.get(name, FIXTURES / name), tmp_path / name)
    assert main(["report", str(results)]) == 0
    html = results / "report" / "report.html"
    page = html.read_text()

    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    run = chromium(tmp_path / "profile", "--dump-dom", probed.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    found = re.search(
        r'<script type="application/json" id="browser-probe">(.*?)</script>', run.stdout
    )
    assert found, "the page never finished loading: " + run.stdout[-500:]
    probe = json.loads(found.group(1))
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert not console and not probe["errors"], (console, probe["errors"])

    # every image the report embeds decoded and is shown
    assert len(probe["images"]) == page.count("<img ") == figures
    for img in probe["images"]:
        assert img["complete"] and img["width"] > 0 and img["shown"] > 0, img
    # the answer is there, and no table makes the page wider than the window
    assert probe["headlines"] == 1
    assert probe["scrollWidth"] <= probe["clientWidth"], probe

    shot = html.with_name("screenshot.png")  # kept with the results for a person to look at
    run = chromium(tmp_path / "profile", f"--screenshot={shot}", html.as_uri())
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    with Image.open(shot) as img:
        assert img.size == WINDOW
        low, high = cast(tuple[int, int], img.convert("L").getextrema())
        assert high - low > 100  # text on a background, not a blank page

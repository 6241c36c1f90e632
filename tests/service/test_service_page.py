"""The inspection page in a real headless Chromium, against a real service process.

Chromium resolves no host but 127.0.0.1 (``--host-resolver-rules``), so the page must load with
everything served by the service itself; the resources it fetched are checked to be same-origin. A
request and an upload must render the span table (one row per span of the library's positions) and the
picture; bad input must show the service's own error message; the .npy download must load with numpy
and equal the library's positions. Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run``).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support import media

import mrope
from mrope.media import load_image, load_video
from mrope.models._routes import ROUTE_NAMES

pytestmark = pytest.mark.timeout(120)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrope", "serve", "--port", str(port), "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"the service did not start: {proc.stderr.read().decode()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, Path]]:
    assert CHROMIUM and DRIVER, (
        "the page test needs chromium and chromedriver (apt-get install chromium chromium-driver)"
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path_factory.mktemp("downloads")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no network but this machine
        "--window-size=1300,1000",
    ):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads)})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        yield driver, downloads
    finally:
        driver.quit()


def wait_for(driver, script: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for: {script}")


def table_rows(driver) -> list[list[str]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#spans tbody tr'))"
        ".map(tr => Array.from(tr.children).map(td => td.textContent))"
    )


def painted_pixels(driver) -> int:
    return driver.execute_script(
        "const c = document.getElementById('picture'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
        "for (let i = 0; i < d.length; i += 4) if (d[i] + d[i+1] + d[i+2] < 600) n++; return n;"
    )


def expected_rows(p: mrope.Positions) -> list[list[str]]:
    def rng(row: np.ndarray) -> str:
        lo, hi = int(row.min()), int(row.max())
        return str(lo) if lo == hi else f"{lo}..{hi}"

    rows = []
    for s in p.spans:
        block = p.ids[:, s.start : s.stop]
        tokens = str(s.start) if s.stop - s.start == 1 else f"{s.start}..{s.stop - 1}"
        grid = "x".join(map(str, s.grid)) if s.grid else ""
        tile = f"r{s.tile[0]} c{s.tile[1]}" if s.tile else ""
        rows.append([str(s.index), s.kind, tokens, rng(block[0]), rng(block[1]), rng(block[2]), grid, tile])
    return rows


def test_page_request_upload_error_and_download(browser, service_url, tmp_path) -> None:
    driver, downloads = browser
    driver.get(service_url + "/inspect")
    wait_for(driver, "return document.body.dataset.ready === 'yes'")
    assert driver.title.startswith("mrope")
    models = driver.execute_script(
        "return Array.from(document.querySelectorAll('#model option')).map(o => o.value)"
    )
    assert "qwen2.5-vl" in models and "qwen2-vl" in models
    resources = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(service_url + "/") for r in resources), resources

    # a pasted request: the table has one row per span of the library's positions
    body = {
        "model": "qwen2.5-vl",
        "segments": [
            {"type": "text", "tokens": 12},
            {"type": "image", "grid": [1, 16, 24], "tiles": [2, 2]},
            {"type": "video", "grid": [4, 8, 8], "fps": 2.0},
        ],
    }
    expected = mrope.build_positions(
        [mrope.Text(12), mrope.Image(grid=(1, 16, 24), tiles=(2, 2)), mrope.Video(grid=(4, 8, 8), fps=2.0)],
        model="qwen2.5-vl",
    )
    driver.execute_script("document.getElementById('request').value = arguments[0]", json.dumps(body))
    driver.find_element("id", "run").click()
    wait_for(driver, "return document.querySelectorAll('#spans tbody tr').length > 0")
    assert table_rows(driver) == expected_rows(expected)
    summary = driver.find_element("id", "summary").text
    assert f"delta {expected.delta}" in summary and f"{expected.num_tokens} tokens" in summary
    assert painted_pixels(driver) > 20_000  # the picture: span bar and three strips

    # the download is an .npy numpy loads, equal to the library's positions
    driver.find_element("id", "download").click()
    npy = Path(wait_for(driver, "return true") and downloads / "positions.npy")
    deadline = time.monotonic() + 10
    while not npy.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    np.testing.assert_array_equal(np.load(npy), expected.ids)
    assert np.load(npy).dtype == np.int32  # as the service's npy form writes these values

    # bad input: the service's own message
    bad = {"model": "qwen2.5-vl", "segments": [{"type": "text", "tokens": -1}]}
    driver.execute_script("document.getElementById('request').value = arguments[0]", json.dumps(bad))
    driver.find_element("id", "run").click()
    message = wait_for(
        driver, "const e = document.getElementById('error'); return !e.hidden && e.textContent"
    )
    assert "segment 0 tokens: Input should be greater than or equal to 0" in message
    assert "422 validation_error" in message

    # an upload: an image and a video, sized from their headers
    image = media.write_image(tmp_path / "cat.png", 448, 336)
    video = media.write_video(tmp_path / "clip.mp4", num_frames=24, fps=12)
    driver.find_element("id", "files").send_keys(f"{image}\n{video}")
    driver.execute_script("document.getElementById('model').value = 'qwen2-vl'")
    driver.execute_script("document.querySelector('#spans tbody').textContent = ''")
    driver.find_element("id", "upload").click()
    wait_for(driver, "return document.querySelectorAll('#spans tbody tr').length > 0")
    assert driver.find_element("id", "error").get_attribute("hidden") is not None
    uploaded = mrope.build_positions(
        [load_image(image, model="qwen2-vl"), load_video(video, model="qwen2-vl")], model="qwen2-vl"
    )
    assert table_rows(driver) == expected_rows(uploaded)
    assert painted_pixels(driver) > 20_000

    # a file dropped on the drop zone (a real drop event carrying a File)
    driver.execute_script(
        "const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));"
        "const dt = new DataTransfer(); dt.items.add(new File([bytes], 'dropped.png', {type: 'image/png'}));"
        "document.getElementById('drop').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));",
        base64.b64encode(image.read_bytes()).decode(),
    )
    assert driver.find_element("id", "chosen").text == "dropped.png"
    driver.execute_script("document.querySelector('#spans tbody').textContent = ''")
    driver.find_element("id", "upload").click()
    wait_for(driver, "return document.querySelectorAll('#spans tbody tr').length > 0")
    dropped = mrope.build_positions([load_image(image, model="qwen2-vl")], model="qwen2-vl")
    assert table_rows(driver) == expected_rows(dropped)


def test_page_shows_what_an_upload_read(browser, service_url, tmp_path) -> None:
    """The files table: the route chosen, an EXIF-rotated photo's size as that route reads it, a rotated
    video's rotation, own rate and frames sampled; the span table's grid is labelled as the merged one."""
    driver, _ = browser
    driver.get(service_url + "/inspect")
    wait_for(driver, "return document.body.dataset.ready === 'yes'")
    routes = driver.execute_script(
        "return Array.from(document.querySelectorAll('#route option')).map(o => o.value)"
    )
    assert routes == list(ROUTE_NAMES)
    assert "merged grid" in driver.execute_script("return document.querySelector('#spans thead').textContent")
    photo = media.write_image(tmp_path / "portrait.jpg", 640, 480, orientation=6)
    clip = media.write_video(tmp_path / "rot.mp4", 24, 12, 96, 64, rotation=90)
    driver.find_element("id", "files").send_keys(f"{photo}\n{clip}")
    driver.execute_script("document.getElementById('model').value = 'qwen2-vl'")
    driver.execute_script("document.getElementById('route').value = 'qwen-vl-utils'")
    driver.find_element("id", "upload").click()
    wait_for(driver, "return document.querySelectorAll('#read tbody tr').length === 2")
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#read tbody tr'))"
        ".map(tr => Array.from(tr.children).map(td => td.textContent))"
    )
    image = load_image(photo, model="qwen2-vl", route="qwen-vl-utils")
    video = load_video(clip, model="qwen2-vl", route="qwen-vl-utils")
    assert rows[0] == [
        "portrait.jpg", "image", "qwen-vl-utils", "640x480", "", "", "",
        f"{image.grid[1] * 14}x{image.grid[2] * 14}", "x".join(map(str, image.grid)),
    ]  # fmt: skip
    assert rows[1] == [
        "rot.mp4", "video", "qwen-vl-utils", "64x96", "90", "12", f"{len(video.frame_times)} / 24",
        f"{video.grid[1] * 14}x{video.grid[2] * 14}", "x".join(map(str, video.grid)),
    ]  # fmt: skip

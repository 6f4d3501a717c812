"""`make docs-check`: the built documentation site looked at by a real browser.

    python e2e/docs/docs_check.py site

Serves the built site (the directory given) on 127.0.0.1, opens it in headless Chromium
through chromedriver (Debian's `chromium` and `chromium-driver`; `$CHROMIUM` and
`$CHROMEDRIVER` point elsewhere), and checks three things a reader would notice first:

1. the home page renders: its title, its heading, the navigation;
2. the search works: typing in the search box lists results (the search index is loaded by
   a web worker, so this needs JavaScript and the served index);
3. an API page renders: `leasecron.Scheduler`'s heading and signature, generated from the
   docstrings.

A screenshot of each is saved in `<site>/_check/`; the exit status is 1 when a check fails.
"""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

WAIT_SECONDS = 20.0


@contextmanager
def served(root: Path) -> Iterator[str]:
    """`root` over HTTP on a free port of 127.0.0.1; the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: WebDriver, what: str, check: Callable[[WebDriver], object]) -> None:
    try:
        WebDriverWait(driver, WAIT_SECONDS).until(check)
    except Exception as error:
        raise AssertionError(f"{what}: not seen within {WAIT_SECONDS:.0f} s") from error


def check_home(driver: WebDriver, base: str) -> str:
    driver.get(f"{base}/")
    wait_for(driver, "the home page's heading", lambda d: d.find_elements(By.CSS_SELECTOR, "h1"))
    heading = driver.find_element(By.CSS_SELECTOR, "article h1").text
    tabs = driver.find_elements(By.CSS_SELECTOR, ".md-nav__link")
    assert "leasecron" in driver.title, f"title {driver.title!r}"
    assert heading == "leasecron", f"heading {heading!r}"
    assert len(tabs) >= 20, f"{len(tabs)} navigation links"
    return f"title {driver.title!r}, heading {heading!r}, {len(tabs)} navigation links"


def check_search(driver: WebDriver, base: str) -> str:
    driver.get(f"{base}/")
    box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")
    wait_for(driver, "the search box", lambda d: box.is_displayed())
    box.click()
    box.send_keys("fencing token")
    results = "li.md-search-result__item"
    wait_for(driver, "search results", lambda d: d.find_elements(By.CSS_SELECTOR, results))
    found = driver.find_elements(By.CSS_SELECTOR, results)
    first = found[0].find_element(By.CSS_SELECTOR, "h1, h2").text
    return f"{len(found)} results for 'fencing token', the first {first!r}"


def check_api_page(driver: WebDriver, base: str) -> str:
    driver.get(f"{base}/reference/api/leasecron/")
    heading = "h2[id='leasecron.Scheduler']"
    wait_for(driver, "leasecron.Scheduler", lambda d: d.find_elements(By.CSS_SELECTOR, heading))
    signature = driver.find_element(By.CSS_SELECTOR, ".doc-signature").text
    objects = driver.find_elements(By.CSS_SELECTOR, ".doc-object")
    assert "Scheduler(" in signature, f"first signature {signature[:80]!r}"
    assert len(objects) >= 20, f"{len(objects)} documented objects"
    return (
        f"{len(objects)} documented objects, the first signature {signature.split('(')[0]!r}(...)"
    )


CHECKS: dict[str, Callable[[WebDriver, str], str]] = {
    "home": check_home,
    "search": check_search,
    "api": check_api_page,
}


def main(site: Path) -> int:
    if not (site / "index.html").is_file():
        print(f"no built site in {site} (make docs builds it)", file=sys.stderr)
        return 1
    shots = site / "_check"
    shots.mkdir(exist_ok=True)
    failed = 0
    with served(site) as base, browser() as driver:
        for name, check in CHECKS.items():
            try:
                outcome = f"ok   {name}: {check(driver, base)}"
            except (AssertionError, WebDriverException) as error:
                failed += 1
                outcome = f"FAIL {name}: {error}"
            driver.save_screenshot(str(shots / f"{name}.png"))
            print(f"{outcome} ({shots / name}.png)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "site")))

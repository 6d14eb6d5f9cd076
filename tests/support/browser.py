"""Headless Chromium (Debian's chromium and chromedriver) for the tests that look at pages as a person does:
the Dagster UI, the advice report; screenshots go to tests/artifacts/."""
from __future__ import annotations

import os

import pytest

from tests.support import ROOT

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1600,1300")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), \
            f"{path} is missing: `apt-get install chromium chromium-driver` (infra/test.sh)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    os.makedirs(ARTIFACTS, exist_ok=True)
    yield driver
    driver.quit()


def open_page(driver, url: str, texts: list[str], timeout: float = 90) -> str:
    """Load the page, dismiss the first-visit community dialog, wait until every text is on the page and
    nothing is loading."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)

    def ready(d):
        body = d.find_element(By.TAG_NAME, "body").text
        return body if all(t in body for t in texts) and "Loading..." not in body else False

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.5).until(ready)
        _dismiss_first_visit_dialog(driver)
        return WebDriverWait(driver, 10, poll_frequency=0.5).until(ready)
    except Exception:
        shot = screenshot(driver, "timed-out.png", check=False)
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"{url}: not all of {texts} appeared (screenshot {shot}); page text:\n{body[:3000]}")


def _dismiss_first_visit_dialog(driver, wait: float = 5) -> None:
    """Dagster asks a new browser profile to join its community, a few seconds after the first page loads."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def skip_button(d):
        buttons = [b for b in d.find_elements(By.XPATH, "//button[normalize-space()='Skip']") if b.is_displayed()]
        return buttons[0] if buttons else False

    try:
        WebDriverWait(driver, wait, poll_frequency=0.25).until(skip_button).click()
    except TimeoutException:
        return
    WebDriverWait(driver, 10, poll_frequency=0.25).until(lambda d: not skip_button(d))


def screenshot(driver, name: str, check: bool = True) -> str:
    path = os.path.join(ARTIFACTS, name)
    saved = driver.save_screenshot(path)
    if check:
        assert saved and os.path.getsize(path) > 10_000, f"{path} looks empty"
    return path

"""Headless Chromium, for the advice report as a person sees it (tests/support/browser.py)."""
from tests.support.browser import browser  # noqa: F401

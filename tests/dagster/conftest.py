"""The Dagster tests' shared fixtures: one real webserver and daemon with one range backfill for the session
(tests/support/dagster_fixtures.py), and headless Chromium (tests/support/browser.py)."""
from tests.support.browser import browser  # noqa: F401
from tests.support.dagster_fixtures import dagster_stack, range_backfill  # noqa: F401

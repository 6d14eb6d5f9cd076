"""The Dagster UI as a person sees it, in headless Chromium (Debian's chromium and chromedriver): the asset
graph with Retrace's asset groups and the spec job's assets, and the page of a range backfill that ran;
screenshots in tests/artifacts/.

Uses the session's webserver, daemon and backfill (tests/support/dagster_fixtures.py).
"""
from __future__ import annotations

from urllib.parse import quote

from tests.support.browser import open_page, screenshot
from tests.support.dagster_fixtures import FIRST, LAST, OUTPUT_KEYS

REPOSITORIES = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"


def test_asset_graph_shows_the_retrace_assets(browser, dagster_stack, range_backfill):
    server = dagster_stack["server"]
    # the global lineage shows one group per job: the spec's job's (retrace) and each example job's
    body = open_page(browser, f"{server.url}/asset-groups",
                     ["retrace", "default", "device_minute", "region_alarms", "Materialize all"])
    assert "Global asset lineage" in body
    [repo] = server.graphql(REPOSITORIES)["repositoriesOrError"]["nodes"]
    where = quote(f"{repo['name']}@{repo['location']['name']}", safe="@")  # an encoded @ is not parsed
    open_page(browser, f"{server.url}/locations/{where}/asset-groups/default", [*OUTPUT_KEYS, "Materialize all"])
    screenshot(browser, "asset-graph.png")


def test_backfill_page_shows_the_range_and_its_assets(browser, dagster_stack, range_backfill):
    url = f"{dagster_stack['server'].url}/runs/b/{range_backfill['id']}"
    body = open_page(browser, url, [f"{FIRST}...{LAST}", *OUTPUT_KEYS, "100% completed"])
    assert range_backfill["id"] in body
    screenshot(browser, "backfill.png")

"""`replay advise` on a journal of known lateness (1% of events 30-60 s late, the rest under 2 s), and the
report's files: JSON, PNG plots, and the HTML page as headless Chromium shows it."""
from __future__ import annotations

import hashlib
import json
import os

import pytest
import yaml

from replay.cli.main import main
from tests.support import target_dir
from tests.support.browser import ARTIFACTS
from tests.support.lakes import EVENTS_PER_PARTITION, LATE_EVERY, PARTITIONS, known_lateness
from replay.ops import outputs

# each candidate is one engine replay (~4 s here): few, around the known lateness
GRIDS = ["--late-grid", "1s,2s,30s,1m,2m", "--out-of-order-grid", "1s,2s,5s"]


@pytest.fixture(scope="module")
def advised(tmp_path_factory, spark):
    root = tmp_path_factory.mktemp("advise")
    landing, lake = str(root / "landing"), str(root / "lake")
    known_lateness(landing)
    policy = root / "policy.yaml"
    policy.write_text(yaml.safe_dump({"window": {"kind": "tumbling", "size": "10s"}}))
    assert main(["ingest", "--landing", landing, "--lake", lake]) == 0
    out = {}
    for completeness in ("0.99", "0.9999"):
        folder = str(root / f"advice-{completeness}")
        assert main(["advise", "--lake", lake, "--policy", str(policy), "--completeness", completeness, *GRIDS,
                     "--out", folder, "--html"]) == 0
        out[completeness] = (folder, json.load(open(os.path.join(folder, "advice.json"))))
    return {"lake": lake, "policy": policy, "root": root, "advice": out}


def _seconds(text: str) -> float:
    from replay.model.durations import parse_duration

    return parse_duration(text) / 1e6


def test_the_advice_for_99_percent_is_a_late_tolerance_between_2_and_30_seconds(advised):
    _, advice = advised["advice"]["0.99"]
    assert 2 <= _seconds(advice["recommended"]["late_arrival_tolerance"]) <= 30
    assert advice["profile"]["events"] == PARTITIONS * EVENTS_PER_PARTITION


def test_the_advice_for_99_99_percent_covers_the_60_second_tail(advised):
    # the late tail ends just below 60 s, and an event exactly L late is on time (spec section 3): 1m keeps all
    _, advice = advised["advice"]["0.9999"]
    assert _seconds(advice["recommended"]["late_arrival_tolerance"]) >= 60
    assert advice["predicted"]["late"] == 0


def test_the_late_sweep_counts_exactly_the_events_later_than_each_candidate(advised):
    _, advice = advised["advice"]["0.99"]
    late = {r["tolerance"]: r["late"] for r in advice["late_sweep"]}
    late_events = PARTITIONS * (EVENTS_PER_PARTITION // LATE_EVERY)
    assert late["2s"] == late["30s"] == late_events  # every 30-60 s event, none of the others
    assert late["1s"] > late["2s"]
    assert late["1m"] == 0 and "2m" not in late  # no event is later than 1m: larger candidates are not replayed


def test_replaying_the_recommended_policy_adjusts_exactly_the_predicted_events(advised, spark):

    from pyspark.sql import functions as F

    _, advice = advised["advice"]["0.99"]
    policy = advised["root"] / "recommended.yaml"
    policy.write_text(yaml.safe_dump(advice["recommended_policy"]))
    assert main(["run", "--lake", advised["lake"], "--policy", str(policy), "--target", "recommended"]) == 0
    decisions = outputs.read(spark, target_dir(advised["lake"], "recommended"), "decisions")
    events = decisions.where(F.col("kind") == "event")
    assert events.where(F.col("action") == "adjusted").count() == advice["predicted"]["adjusted"]
    assert events.where(F.col("action") == "dropped").count() == advice["predicted"]["dropped"]
    assert events.count() == advice["predicted"]["events"]


def test_the_advice_is_the_same_on_every_run_and_shuffle_partition_count(advised, spark, tmp_path):
    folder, first = advised["advice"]["0.99"]
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "5")
    try:
        assert main(["advise", "--lake", advised["lake"], "--policy", str(advised["policy"]), "--completeness",
                     "0.99", *GRIDS, "--out", str(tmp_path)]) == 0
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
    digest = lambda p: hashlib.sha256(open(os.path.join(p, "advice.json"), "rb").read()).hexdigest()  # noqa: E731
    assert digest(str(tmp_path)) == digest(folder)


def test_the_plots_are_real_png_images(advised):
    folder, _ = advised["advice"]["0.99"]
    for name in ("tradeoff.png", "lateness.png"):
        data = open(os.path.join(folder, name), "rb").read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert len(data) > 10_000, f"{name} is only {len(data)} bytes"


def test_the_html_report_opens_in_chromium_with_its_plots(advised, browser):
    from selenium.webdriver.common.by import By

    folder, advice = advised["advice"]["0.99"]
    browser.get("file://" + os.path.join(folder, "advice.html"))
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "Tolerance advice for job default" in body
    assert f"late_arrival_tolerance: {advice['recommended']['late_arrival_tolerance']}" in body
    images = browser.find_elements(By.TAG_NAME, "img")
    assert len(images) == 2
    assert all(browser.execute_script("return arguments[0].naturalWidth", i) > 300 for i in images)
    shot = os.path.join(ARTIFACTS, "advice-report.png")
    assert browser.save_screenshot(shot) and os.path.getsize(shot) > 10_000

"""Each example job, replayed by Spark, equals the tests' pure-Python model of the same job on random journals."""
from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from replay.engine import pipeline as engine
from replay.engine import windows as windows_of
from replay.io import journal
from replay.model.durations import format_instant
from replay.model.jobs import load_folder
from replay.ops.catalog import DEFAULT_FOLDER
from tests.support.examples import examples
from tests.support.job_model import run_job_model
from tests.support.journals import journals

CATALOG = load_folder(DEFAULT_FOLDER)
DEVICES = {"dev-1": "eu-west", "dev-2": "eu-west", "dev-3": "sa-east"}


@st.composite
def sensor_journals(draw):
    """The spec's random journals, each event a sensor reading: temperatures on a coarse grid (ties are common)."""
    rows = draw(journals())
    for r in rows:
        if r["kind"] != "event":
            continue
        device = draw(st.sampled_from(sorted(DEVICES)))
        r.update(key=device, device=device, region=DEVICES[device],
                 temperature=draw(st.sampled_from([19.5, 20.25, 21.0, 21.0, 35.125, None])),
                 pressure=draw(st.sampled_from([1001.0, 1013.25, 1020.5])),
                 status=draw(st.sampled_from(["ok", "ok", "alarm", "test"])))
    return rows


def spark_outputs(spark, job, rows):
    """The engine's windows and dead letters for the job (the runner only adds Delta commits around it)."""
    out = engine.replay(journal.from_rows(spark, rows), job)
    windows, letters = _collected(out)
    out.unpersist()
    return windows, sorted(letters)


def _collected(out: engine.Outputs) -> tuple[list[dict], list[tuple]]:
    windows = [_plain(r.asDict()) for r in out.windows.withColumn("window_start", F.unix_micros("window_start"))
               .withColumn("window_end", F.unix_micros("window_end")).collect()]
    letters = out.dead_letters.select("seq", "reason", F.unix_micros("window_start").alias("window_start")).collect()
    return windows, [(r["seq"], r["reason"], r["window_start"] and format_instant(r["window_start"])) for r in letters]


def spark_outputs_in_pieces(spark, job, rows, cuts, stale: list | None = None):
    """The engine's windows and dead letters for rows[0:c1], rows[c1:c2], ..., each piece continued from the state
    the one before left (its open windows' members), as a live job's batches are; and the states' open windows.
    With `stale`: each piece's open windows are the ones before it and the members it added (`State.windows_added`),
    as a checkpoint that saves only those holds them, with the members of windows closed since: how many of those
    each piece starts with is appended to `stale`."""
    df = journal.from_rows(spark, rows).persist()
    state, windows, letters, outs, carried = None, [], [], [], []
    bounds = [0, *cuts, len(rows)]
    for lo, hi in zip(bounds, bounds[1:]):
        if stale is not None and state is not None and state.windows is not None:
            stale.append(state.windows.count() - windows_of.without_closed(state, job.policy).windows.count())
        out = engine.replay(df.where(f"seq >= {lo} AND seq < {hi}"), job, flush=hi == len(rows),
                            continuing=engine.Continuing(state, df.where(f"seq < {lo}"), keep_state=True))
        outs.append(out)
        got_windows, got_letters = _collected(out)
        held = state.windows if state is not None else None
        windows, letters, state = windows + got_windows, letters + got_letters, out.state
        if stale is not None and held is not None and state.windows_added is not None:
            state = dataclasses.replace(state, windows=held.unionByName(state.windows_added))
        if hi < len(rows) and state.windows is not None:
            carried.append(state.windows)
    columns = [w.columns for w in carried]
    for out in outs:
        out.unpersist()
    df.unpersist()
    return windows, sorted(letters), columns


def _plain(row: dict) -> dict:
    for c in ("window_start", "window_end"):
        row[c] = format_instant(row[c])
    return row


def _key(row: dict):
    return json.dumps(row, sort_keys=True, default=str)


@pytest.mark.parametrize("name", sorted(CATALOG.jobs))
def test_example_job_matches_the_model(spark, name):
    _matches_the_model_on_drawn_journals(spark, CATALOG.job(name), examples(6))


def _matches_the_model_on_drawn_journals(spark, job, how_many: int) -> None:
    """The engine's windows and dead letters equal the model's for `how_many` drawn journals."""
    @settings(max_examples=how_many, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(rows=sensor_journals())
    def check(rows):
        expected = run_job_model(job, json.loads(json.dumps(rows)))
        windows, letters = spark_outputs(spark, job, rows)
        got, want_windows = sorted(map(_key, windows)), sorted(map(_key, expected["windows"]))
        assert got == want_windows, (f"only in Spark: {sorted(set(got) - set(want_windows))}\n"
                                     f"only in the model: {sorted(set(want_windows) - set(got))}\n{json.dumps(rows)}")
        want = sorted((d["seq"], d["reason"], d["window_start"]) for d in expected["dead_letters"])
        assert letters == want, json.dumps(rows)

    check()


VARIANTS = {  # issue 48 on a user's job: substreams over its field `device`, the source's punctuations alone
    "device_substreams": {"substream_by": "device"},
    "source_strategy": {"watermark": {"strategy": "source"}},
    "device_substreams_punctuated": {"substream_by": "device",
                                     "watermark": {"strategy": "punctuated", "every_events": 2, "delay": "1s"}},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_example_job_with_field_substreams_or_source_punctuations_matches_the_model(spark, variant):
    """device_minute with its policy changed: the drawn journals carry punctuation rows (tests.support.journals)."""
    from replay.model.policy import SUBSTREAM_COLUMNS, Policy

    job = CATALOG.job("device_minute")
    policy = Policy.from_dict({**job.policy.to_dict(), **VARIANTS[variant]},
                              fields=SUBSTREAM_COLUMNS + tuple(n for n, _ in job.fields))
    _matches_the_model_on_drawn_journals(spark, dataclasses.replace(job, policy=policy), examples(3))


@st.composite
def sensor_journals_with_cuts(draw):
    rows = draw(sensor_journals())
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(rows) - 1)), min_size=1, max_size=3))) if len(rows) > 1 else []
    return rows, cuts


# what the example jobs' groups and aggregates read of a window's members (seq: max_by's tie-break)
READ = {"device_minute": ["scope", "k", "device", "temperature", "pressure", "status"],
        "region_alarms": ["scope", "k", "seq", "region", "device", "temperature", "status"]}


@pytest.mark.parametrize("name", sorted(CATALOG.jobs))
def test_example_job_continued_from_its_open_windows_in_pieces_matches_the_model(spark, name):
    """A live job's batches: each piece continues from the open windows the one before left, which carry only the
    members' columns the job's groups and aggregates read."""
    job, seen = CATALOG.job(name), []

    @settings(max_examples=examples(4), deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(case=sensor_journals_with_cuts())
    def check(case):
        rows, cuts = case
        expected = run_job_model(job, json.loads(json.dumps(rows)))
        windows, letters, carried = spark_outputs_in_pieces(spark, job, rows, cuts)
        assert sorted(map(_key, windows)) == sorted(map(_key, expected["windows"])), json.dumps([cuts, rows])
        want = sorted((d["seq"], d["reason"], d["window_start"]) for d in expected["dead_letters"])
        assert letters == want, json.dumps([cuts, rows])
        assert all(columns == READ[name] for columns in carried), carried
        seen.extend(carried)

    check()
    assert seen, "no drawn journal left a window open between pieces"


SHORT_WINDOWS = {"device_minute": {"kind": "tumbling", "size": "2s"},  # windows that close within the journal
                 "region_alarms": {"kind": "hopping", "size": "3s", "hop": "1s"}}


def _readings(n: int) -> list[dict]:
    """A reading a second for `n` seconds on one partition, each arriving on time: windows close as it goes."""
    from datetime import timedelta

    from tests.support.journals import START, _iso

    rows = []
    for i in range(n):
        device = sorted(DEVICES)[i % 3]
        at = _iso(START + timedelta(seconds=i))
        rows.append({"partition": 0, "offset": i, "kind": "event", "arrival_time": at, "event_time": at,
                     "key": device, "value": float(i), "device": device, "region": DEVICES[device],
                     "temperature": [19.5, 21.0, 35.125][i % 3], "pressure": 1013.25,
                     "status": ["ok", "alarm", "ok", "test"][i % 4]})
    return rows


@pytest.mark.parametrize("name", sorted(CATALOG.jobs))
def test_example_job_continued_from_open_windows_saved_a_batch_at_a_time_matches_the_model(spark, name):
    """A checkpoint that saves only each batch's new members still holds those of the windows closed since its last
    whole save: the engine leaves them out (`windows.without_closed`), so the outputs are the model's."""
    from replay.model.policy import Policy

    job = CATALOG.job(name)
    policy = Policy.from_dict({**job.policy.to_dict(), "window": SHORT_WINDOWS[name]},
                              fields=tuple(n for n, _ in job.fields))
    job, rows, stale = dataclasses.replace(job, policy=policy), _readings(30), []
    expected = run_job_model(job, json.loads(json.dumps(rows)))
    windows, letters, _ = spark_outputs_in_pieces(spark, job, rows, [8, 16, 24], stale)
    assert sorted(map(_key, windows)) == sorted(map(_key, expected["windows"]))
    assert letters == sorted((d["seq"], d["reason"], d["window_start"]) for d in expected["dead_letters"])
    assert max(stale) > 0, "no piece started with a member of a window closed before it"

"""Synthetic landing stream: what a broker's sink would drop into a landing folder.

`generate(out_dir, StreamSpec(events, ...))` writes `files` files (`part-00000.jsonl` ... or `.parquet`) in
arrival order: file i holds a contiguous range of arrivals, and every file mixes all partitions.

Rows: `partition`, `offset` (0, 1, 2, ... per partition), `arrival_time` (nondecreasing per
partition), `event_time`, `key` (`k00042`), `value`. Times are ISO-8601 UTC strings with
microseconds and `Z`. What makes the stream realistic (rates are per event, drawn independently):

- arrivals are a Poisson process of `rate` events/s, spread over partitions with uneven weights;
- on time (~96.5%): event_time = arrival - a lag of tens to hundreds of ms (lognormal, median 80 ms);
- late (~3%): lag of 2 s to 10 min (log-uniform); early (~0.5%): 1 to 30 min ahead (log-uniform);
- malformed (~0.05%, any class): event_time missing, `"not-a-time"`, or (jsonl only) a truncated,
  unparseable line; in parquet, missing and truncated both become a null event_time;
- idle gaps: the last partition is silent for 2-6 min about every 10 min, and (with >= 4
  partitions) partition 1 for 20-90 s about every 30 min; their traffic moves to other partitions.

Shapes (`shape=`): "basic" is the rows above, with `value` a positive amount with 2 decimals.
"sensors" adds a device reading to each row, in this order after `value` (which is then the
temperature; `key` is the device):

- `device` (string, = `key`), `region` (string, one of `REGIONS`; fixed per device), `site`
  (string, the region's site in `SITES`, some non-ASCII: "Zürich", "São Paulo", "東京");
- `temperature` (float, °C, 2 decimals): per-device baseline (18-30) + a daily cycle (local time)
  + noise, within 14-34; spiked by +22 to +45 in ~0.3% of rows, then within 36-79;
- `pressure` (float, hPa, 1 decimal): per-device baseline + slow regional weather + noise, within 985-1040;
- `status` (string): "alarm" exactly when the temperature spiked, "test" (~1%, a normal reading
  that jobs filter out), else "ok";
- `meta` (object; a struct column in parquet): `firmware` (string like "1.4.2", fixed per device)
  and `battery` (int 0-100, drains per device and recharges at 0).

Device attributes (region, firmware, baselines) are drawn from the seed and `keys`, readings from
a stream of their own: a sensors run has the events (partitions, offsets, times, keys, malformed
rows) of the basic run with the same arguments. jsonl writes non-ASCII as raw UTF-8; a torn line
loses the payload with the rest.

Everything is vectorized (numpy + pyarrow) and deterministic: events are generated in fixed
blocks from one seeded stream, so a seed gives the same events whatever `files` and `fmt` are
(and a run with fewer events is a prefix of a run with more), and the same files byte for byte.
"""
from __future__ import annotations

import math
import numbers
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FORMATS = ("jsonl", "parquet")
BLOCK = 1 << 16  # events drawn per block; fixed so that data do not depend on `files`

P_LATE, P_EARLY, P_MALFORMED = 0.03, 0.005, 0.0005
ONTIME_MEDIAN_US, ONTIME_SIGMA = 80_000, 0.7
ONTIME_MIN_US, ONTIME_MAX_US = 5_000, 1_000_000
LATE_MIN_US, LATE_MAX_US = 2_000_000, 600_000_000
EARLY_MIN_US, EARLY_MAX_US = 60_000_000, 1_800_000_000
MALFORMED_KINDS = ("missing_event_time", "unparseable_event_time", "broken_line")

SCHEMA = pa.schema([
    ("partition", pa.int32()), ("offset", pa.int64()), ("arrival_time", pa.string()),
    ("event_time", pa.string()), ("key", pa.string()), ("value", pa.float64()),
])

SHAPES = ("basic", "sensors")
REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "sa-east", "ap-northeast")
REGION_WEIGHTS = (0.25, 0.2, 0.2, 0.15, 0.1, 0.1)
SITES = ("Dublin", "Zürich", "Ashburn", "San José", "São Paulo", "東京")  # one per region
UTC_OFFSET_H = (0, 1, -5, -8, -3, 9)  # per region: where the daily temperature cycle peaks
FIRMWARES = ("1.4.2", "1.4.3", "1.5.0", "1.5.1", "2.0.0")
FIRMWARE_WEIGHTS = (0.15, 0.35, 0.25, 0.2, 0.05)
STATUSES = ("ok", "alarm", "test")
P_TEST, P_SPIKE = 0.01, 0.003
META = pa.struct([("firmware", pa.string()), ("battery", pa.int32())])
SENSOR_SCHEMA = pa.schema(list(SCHEMA) + [
    ("device", pa.string()), ("region", pa.string()), ("site", pa.string()), ("temperature", pa.float64()),
    ("pressure", pa.float64()), ("status", pa.string()), pa.field("meta", META),
])


@dataclass(frozen=True)
class StreamSpec:
    """What to generate: `events` events over `partitions` partitions and `keys` keys, in `files` files of
    format `fmt`, arriving at `rate` events/s from `start`, of shape `shape` ("basic" or "sensors"), drawn
    from `seed`. Checked when built."""

    events: int
    partitions: int = 8
    keys: int = 1000
    files: int = 100
    seed: int = 0
    fmt: str = "jsonl"
    start: str = "2024-01-01T00:00:00Z"
    rate: float = 1000.0
    shape: str = "basic"

    def __post_init__(self):
        _validate(self)

    @property
    def start_us(self) -> int:
        dt = datetime.fromisoformat(self.start)
        dt = dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
        delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def generate(out_dir: str, spec: StreamSpec, *, overwrite: bool = False, log=None) -> dict:
    """Write the landing files of `spec` into `out_dir` and return a summary (events, files, malformed,
    bytes, ...); `log` hears of every tenth of the files written.

    Refuses to write into a folder that already holds `part-*` files unless `overwrite=True`
    (then those are deleted first), so a landing folder never mixes two runs.
    """
    if not isinstance(out_dir, (str, os.PathLike)) or not os.fspath(out_dir):
        raise ValueError(f"out_dir must be a non-empty path, got {out_dir!r}")
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    old = sorted(f for f in os.listdir(out_dir) if f.startswith("part-"))
    if old and not overwrite:
        raise FileExistsError(f"out_dir {out_dir!r} already holds {len(old)} part-* files "
                              f"(e.g. {old[0]}); use an empty folder, or replace them with "
                              "`replay generate --overwrite` (overwrite=True)")
    for f in old:
        os.remove(os.path.join(out_dir, f))
    events_ss, idle_ss, sensors_ss = np.random.SeedSequence(spec.seed).spawn(3)  # the first two as before
    sensors = (_Sensors(np.random.default_rng(sensors_ss), spec.keys, spec.start_us) if spec.shape == "sensors"
               else None)
    stream = _Stream(np.random.default_rng(events_ss), np.random.default_rng(idle_ss),
                     spec.partitions, spec.keys, spec.start_us, spec.rate, sensors)
    t0 = time.perf_counter()
    tally = _write_files(out_dir, spec, stream, sensors, lambda line: log and log(
        f"{line}, {time.perf_counter() - t0:.1f}s"))
    return _summary(out_dir, spec, tally, time.perf_counter() - t0)


@dataclass
class _Tally:
    """What was written: counts of each class of event, bytes, the first and last arrival."""

    totals: dict
    statuses: np.ndarray
    nbytes: int = 0
    first_arrival: int | None = None
    last_arrival: int | None = None


def _write_files(out_dir: str, spec: StreamSpec, stream: "_Stream", sensors: "_Sensors | None", say) -> _Tally:
    """Draw the events block by block and cut them into the files (file i: a contiguous range of arrivals)."""
    events, files = spec.events, spec.files
    bounds = [i * events // files for i in range(files + 1)]
    tally = _Tally({"late": 0, "early": 0, **{k: 0 for k in MALFORMED_KINDS}}, np.zeros(len(STATUSES), np.int64))
    f, writer = 0, None
    for b0 in range(0, events, BLOCK):
        blk = stream.block(min(BLOCK, events - b0))
        _count(tally, blk, sensors is not None)
        rows = _to_arrow(blk, spec.fmt, stream.key_names, sensors)
        lo = b0
        while lo < b0 + len(rows):
            if writer is None:
                writer = _Writer(out_dir, f, spec.fmt)
            hi = min(bounds[f + 1], b0 + len(rows))
            writer.append(rows.slice(lo - b0, hi - lo))
            lo = hi
            if hi == bounds[f + 1]:
                tally.nbytes += writer.close()
                writer, f = None, f + 1
                if f * 10 // files != (f - 1) * 10 // files or f == files:
                    say(f"generate: {f}/{files} files, {hi:,}/{events:,} events")
    return tally


def _count(tally: _Tally, blk: dict, sensors: bool) -> None:
    for k in ("late", "early"):
        tally.totals[k] += int(blk[k].sum())
    for i, k in enumerate(MALFORMED_KINDS):
        tally.totals[k] += int((blk["malformed"] & (blk["malformed_kind"] == i)).sum())
    if sensors:
        tally.statuses += np.bincount(blk["status"], minlength=len(STATUSES))
    tally.first_arrival = blk["arrival_us"][0] if tally.first_arrival is None else tally.first_arrival
    tally.last_arrival = blk["arrival_us"][-1]


def _summary(out_dir: str, spec: StreamSpec, tally: _Tally, seconds: float) -> dict:
    totals = dict(tally.totals)
    malformed = sum(totals[k] for k in MALFORMED_KINDS)
    if spec.fmt == "parquet":  # a parquet row cannot be a broken line; it is a null event_time
        totals["missing_event_time"] += totals.pop("broken_line")
    summary = {
        "events": spec.events, "files": spec.files, "malformed": malformed, "bytes": tally.nbytes,
        "format": spec.fmt, "shape": spec.shape, "out_dir": out_dir, "partitions": spec.partitions,
        "keys": spec.keys, "seed": spec.seed, "late": totals["late"], "early": totals["early"],
        "malformed_by_kind": {k: totals[k] for k in MALFORMED_KINDS if k in totals},
        "first_arrival": _iso_us(np.array([tally.first_arrival]))[0].as_py(),
        "last_arrival": _iso_us(np.array([tally.last_arrival]))[0].as_py(),
        "seconds": round(seconds, 3),
    }
    if spec.shape == "sensors":  # over every event drawn, malformed ones included
        summary["status"] = {k: int(c) for k, c in zip(STATUSES, tally.statuses)}
    return summary


class _Stream:
    """The event stream, one block at a time; state carries over between blocks."""

    def __init__(self, rng, idle_rng, partitions, keys, start_us, rate, sensors=None):
        self.rng, self.partitions, self.keys, self.start_us = rng, partitions, keys, start_us
        self.sensors = sensors
        self.mean_gap_us = 1e6 / rate
        weights = 1.0 + 0.5 * rng.random(partitions)  # uneven partition rates
        self.cdf = np.cumsum(weights / weights.sum())
        self.key_perm = rng.permutation(keys)  # hot keys are spread over the key space
        width = max(5, len(str(keys - 1)))
        self.key_names = pa.array(np.char.add("k", np.char.zfill(np.arange(keys).astype(str), width)))
        self.clock = 0.0  # microseconds since start, as a float (sum of gaps)
        self.next_offset = np.zeros(partitions, np.int64)
        # (partition, mean interval, min length, max length) in seconds
        specs = []
        if partitions >= 2:
            specs.append((partitions - 1, 600, 120, 360))
        if partitions >= 4:
            specs.append((1, 1800, 20, 90))
        self.idle = [_IdleGaps(idle_rng, p, *s) for p, *s in specs]
        idle_parts = {g.partition for g in self.idle}
        self.busy = np.array([p for p in range(partitions) if p not in idle_parts], np.int64)
        self.busy_cdf = np.cumsum(weights[self.busy] / weights[self.busy].sum())

    def block(self, n: int) -> dict:
        """The next n <= BLOCK events. Always draws a full block (and cuts it) so that a shorter
        run is a prefix of a longer one; only the last block of a run is ever cut."""
        full = self._block(BLOCK)
        if self.sensors is not None:  # from their own stream: the events do not depend on the shape
            full.update(self.sensors.readings(full["key"], full["event_us"]))
        return full if n == BLOCK else {k: v[:n] for k, v in full.items()}

    def _block(self, n: int) -> dict:
        rng = self.rng
        cum = self.clock + np.cumsum(rng.exponential(self.mean_gap_us, n))
        self.clock = float(cum[-1])
        arrival = self.start_us + np.floor(cum).astype(np.int64)
        part = np.minimum(np.searchsorted(self.cdf, rng.random(n), side="right"), self.partitions - 1)
        moved_u = rng.random(n)
        for gaps in self.idle:  # traffic of a silent partition goes to the busy ones
            silent = (part == gaps.partition) & gaps.contains(arrival - self.start_us)
            part[silent] = self.busy[np.minimum(
                np.searchsorted(self.busy_cdf, moved_u[silent], side="right"), len(self.busy) - 1)]
        # offsets: rank within the partition (stable = arrival order) + where the partition was
        order = np.argsort(part, kind="stable")
        counts = np.bincount(part, minlength=self.partitions)
        rank = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        offset = np.empty(n, np.int64)
        offset[order] = rank + np.repeat(self.next_offset, counts)
        self.next_offset += counts

        u = rng.random(n)
        late, early = u < P_LATE, (u >= P_LATE) & (u < P_LATE + P_EARLY)
        lag = np.clip(rng.lognormal(math.log(ONTIME_MEDIAN_US), ONTIME_SIGMA, n),
                      ONTIME_MIN_US, ONTIME_MAX_US)
        v = rng.random(n)
        lag = np.where(late, _log_uniform(v, LATE_MIN_US, LATE_MAX_US), lag)
        lag = np.where(early, -_log_uniform(v, EARLY_MIN_US, EARLY_MAX_US), lag)
        event = arrival - lag.astype(np.int64)

        malformed = rng.random(n) < P_MALFORMED
        malformed_kind = rng.integers(0, len(MALFORMED_KINDS), n, dtype=np.int8)
        key = self.key_perm[np.minimum((self.keys * rng.random(n) ** 2).astype(np.int64), self.keys - 1)]
        cents = np.maximum(np.rint(rng.lognormal(3.0, 1.0, n) * 100), 1).astype(np.int64)
        return {"partition": part.astype(np.int32), "offset": offset, "arrival_us": arrival,
                "event_us": event, "key": key, "cents": cents, "late": late, "early": early,
                "malformed": malformed, "malformed_kind": malformed_kind}


class _IdleGaps:
    """Silent intervals of one partition (in microseconds since start), drawn lazily."""

    def __init__(self, rng, partition, mean_every_s, min_s, max_s):
        self.rng, self.partition = rng, partition
        self.mean_every_us, self.min_us, self.max_us = mean_every_s * 1e6, min_s * 1e6, max_s * 1e6
        self.starts, self.ends = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.horizon = 0

    def contains(self, t: np.ndarray) -> np.ndarray:
        while self.horizon <= t[-1]:  # t is sorted; extend 64 gaps at a time
            busy = self.rng.exponential(self.mean_every_us, 64).astype(np.int64)
            silent = self.rng.uniform(self.min_us, self.max_us, 64).astype(np.int64)
            e = self.horizon + np.cumsum(busy + silent)  # busy, silent, busy, silent, ...
            s = e - silent
            self.starts, self.ends = np.concatenate([self.starts, s]), np.concatenate([self.ends, e])
            self.horizon = int(e[-1])
        i = np.searchsorted(self.starts, t, side="right") - 1
        return (i >= 0) & (t < self.ends[np.maximum(i, 0)])


class _Sensors:
    """The sensors shape: per-device attributes (drawn once) and the readings of each block of events."""

    def __init__(self, rng, keys, start_us):
        self.rng, self.start_us = rng, start_us
        self.region = _weighted(rng, REGION_WEIGHTS, keys)
        self.firmware = _weighted(rng, FIRMWARE_WEIGHTS, keys)
        self.temp_base = rng.uniform(1800, 3000, keys)  # centi-degrees C
        self.temp_daily = rng.uniform(50, 300, keys)  # amplitude of the daily cycle
        self.pres_base = np.clip(rng.normal(10130, 50, keys), 9950, 10300)  # deci-hPa
        self.battery0 = rng.uniform(20, 100, keys)  # percent at `start`
        self.drain = rng.uniform(0.2, 2.0, keys)  # percent per hour
        self.weather_phase = rng.uniform(0, 2 * math.pi, len(REGIONS))
        self.utc_offset_us = np.array(UTC_OFFSET_H, np.int64)[self.region] * 3_600_000_000

    def readings(self, key: np.ndarray, event_us: np.ndarray) -> dict:
        """One reading per event of a full block (key: device index; event_us: when it was taken)."""
        rng, n, region = self.rng, len(key), self.region[key]
        u = rng.random(n)
        test, spike = u < P_TEST, (u >= P_TEST) & (u < P_TEST + P_SPIKE)
        spike_by = rng.uniform(2200, 4500, n)
        temp_noise = np.clip(rng.normal(0, 25, n), -100, 100)
        pres_noise = np.clip(rng.normal(0, 3, n), -12, 12)
        day_us = 86_400_000_000
        local_day = ((event_us + self.utc_offset_us[key]) % day_us) / day_us  # 0 at local midnight
        daily = np.sin(2 * math.pi * (local_day - 0.375))  # warmest at 15:00 local
        temp = self.temp_base[key] + self.temp_daily[key] * daily + temp_noise + np.where(spike, spike_by, 0)
        weather = 80 * np.sin(2 * math.pi * event_us / (4 * day_us) + self.weather_phase[region])  # +-8 hPa
        hours = (event_us - self.start_us) / 3_600_000_000
        battery = np.minimum(np.floor(np.mod(self.battery0[key] - self.drain[key] * hours, 101)), 100)
        return {"temp_centi": np.rint(temp).astype(np.int64),
                "pres_deci": np.rint(self.pres_base[key] + weather + pres_noise).astype(np.int64),
                "status": np.where(test, 2, np.where(spike, 1, 0)).astype(np.int8),
                "battery": battery.astype(np.int32)}

    def columns(self, blk: dict) -> dict:
        """A block's region, site, status, firmware and battery as Arrow arrays."""
        region = pa.array(self.region[blk["key"]])
        return {"region": pa.array(REGIONS).take(region), "site": pa.array(SITES).take(region),
                "status": pa.array(STATUSES).take(pa.array(blk["status"])),
                "firmware": pa.array(FIRMWARES).take(pa.array(self.firmware[blk["key"]])),
                "battery": pa.array(blk["battery"])}


def _weighted(rng, weights, n: int) -> np.ndarray:
    """n indices into `weights`, drawn with those weights."""
    cdf = np.cumsum(weights) / sum(weights)
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(weights) - 1)


def _log_uniform(u, lo, hi):
    return np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))


def _iso_us(us: np.ndarray) -> pa.StringArray:
    """Microseconds since the epoch -> `YYYY-MM-DDTHH:MM:SS.ffffffZ`, built as one byte matrix."""
    n = len(us)
    days, rem = np.divmod(us, 86_400_000_000)
    d0 = int(days.min())
    dates = np.arange(d0, int(days.max()) + 1).astype("datetime64[D]").astype("S10")
    buf = np.empty((n, 27), np.uint8)
    buf[:, :10] = dates.view(np.uint8).reshape(-1, 10)[days - d0]
    secs, frac = np.divmod(rem, 1_000_000)
    hours, secs = np.divmod(secs, 3600)
    minutes, secs = np.divmod(secs, 60)
    for col, (value, width) in {11: (hours, 2), 14: (minutes, 2), 17: (secs, 2), 20: (frac, 6)}.items():
        for j in range(width):
            buf[:, col + width - 1 - j] = 48 + (value // 10 ** j) % 10
    for col, ch in ((10, "T"), (13, ":"), (16, ":"), (19, "."), (26, "Z")):
        buf[:, col] = ord(ch)
    offsets = np.arange(0, 27 * (n + 1), 27, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf))


_TWO_DIGITS = pa.array([f"{i:02d}" for i in range(100)])


def _to_arrow(blk: dict, fmt: str, key_names: pa.StringArray, sensors: _Sensors | None = None
              ) -> pa.Table | pa.StringArray:
    """A block as a parquet-ready table, or (jsonl) as its lines, each ending in a newline."""
    n = len(blk["offset"])
    sensor = sensors.columns(blk) if sensors is not None else None
    key = key_names.take(pa.array(blk["key"]))
    arrival = _iso_us(blk["arrival_us"])
    event = _iso_us(blk["event_us"])
    bad, kind = blk["malformed"], blk["malformed_kind"]
    unparseable = bad & (kind == 1)
    event = pc.replace_with_mask(event, pa.array(unparseable),
                                 pa.array(["not-a-time"] * int(unparseable.sum()), pa.string()))
    if fmt == "parquet":
        missing = pa.array(bad & (kind != 1))
        event = pc.if_else(missing, pa.scalar(None, pa.string()), event)
        if sensors is None:
            return pa.Table.from_arrays([pa.array(blk["partition"]), pa.array(blk["offset"]), arrival, event, key,
                                         pa.array(blk["cents"] / 100.0)], schema=SCHEMA)
        temperature = pa.array(blk["temp_centi"] / 100.0)
        meta = pa.StructArray.from_arrays([sensor["firmware"], sensor["battery"]], fields=list(META))
        return pa.Table.from_arrays([pa.array(blk["partition"]), pa.array(blk["offset"]), arrival, event, key,
                                     temperature, key, sensor["region"], sensor["site"], temperature,
                                     pa.array(blk["pres_deci"] / 10.0), sensor["status"], meta],
                                    schema=SENSOR_SCHEMA)
    cents = blk["cents"]
    cols = {"partition": pa.array(blk["partition"]).cast(pa.string()),
            "offset": pa.array(blk["offset"]).cast(pa.string()), "arrival": arrival, "event": event,
            "key": key, "units": pa.array(cents // 100).cast(pa.string()),
            "cents": _TWO_DIGITS.take(pa.array(cents % 100))}
    if sensors is not None:
        cols |= {"temperature": _decimal(blk["temp_centi"], 2), "pressure": _decimal(blk["pres_deci"], 1),
                 "battery": sensor["battery"].cast(pa.string()),
                 **{k: sensor[k] for k in ("region", "site", "status", "firmware")}}

    def lines_of(c: dict, event_time: str) -> pa.StringArray:  # event_time: "full", "absent", "torn"
        head = ['{"partition":', c["partition"], ',"offset":', c["offset"], ',"arrival_time":"', c["arrival"]]
        if event_time == "torn":  # cut off in the middle of event_time, as a torn write would be
            return pc.binary_join_element_wise(*head, '","event_time":"', pc.utf8_slice_codeunits(c["event"], 0, 13),
                                               "\n", "")
        event_field = ['","event_time":"', c["event"]] if event_time == "full" else []
        if sensors is None:
            return pc.binary_join_element_wise(*head, *event_field, '","key":"', c["key"], '","value":', c["units"],
                                               ".", c["cents"], "}\n", "")
        return pc.binary_join_element_wise(
            *head, *event_field, '","key":"', c["key"], '","value":', c["temperature"], ',"device":"', c["key"],
            '","region":"', c["region"], '","site":"', c["site"], '","temperature":', c["temperature"],
            ',"pressure":', c["pressure"], ',"status":"', c["status"], '","meta":{"firmware":"', c["firmware"],
            '","battery":', c["battery"], "}}\n", "")

    lines = lines_of(cols, "full")
    for mask, event_time in ((bad & (kind == 0), "absent"), (bad & (kind == 2), "torn")):
        if mask.any():  # rare rows: build their lines alone and patch them in
            idx = pa.array(np.flatnonzero(mask))
            lines = pc.replace_with_mask(lines, pa.array(mask),
                                         lines_of({k: v.take(idx) for k, v in cols.items()}, event_time))
    assert len(lines) == n
    return lines


def _decimal(scaled: np.ndarray, decimals: int) -> pa.StringArray:
    """Integers in units of 10**-decimals (1 <= decimals <= 2) -> their decimal text, e.g. -105, 2 -> "-1.05"."""
    whole, frac = np.divmod(np.abs(scaled), 10 ** decimals)
    frac = _TWO_DIGITS.take(pa.array(frac)) if decimals == 2 else pa.array(frac).cast(pa.string())
    sign = pc.if_else(pa.array(scaled < 0), "-", "")
    return pc.binary_join_element_wise(sign, pa.array(whole).cast(pa.string()), ".", frac, "")


class _Writer:
    """One landing file, written under a hidden temporary name and renamed when complete."""

    def __init__(self, out_dir: str, index: int, fmt: str):
        self.fmt = fmt
        self.path = os.path.join(out_dir, f"part-{index:05d}.{fmt}")
        self.tmp = os.path.join(out_dir, f".part-{index:05d}.{fmt}.tmp")
        self.parts: list = []
        self.fh = open(self.tmp, "wb") if fmt == "jsonl" else None

    def append(self, rows) -> None:
        if self.fh is None:
            self.parts.append(rows)
            return
        rows = rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows
        offsets = np.frombuffer(rows.buffers()[1], np.int32, len(rows) + 1, rows.offset * 4)
        self.fh.write(memoryview(rows.buffers()[2])[offsets[0]:offsets[-1]])

    def close(self) -> int:
        if self.fh is not None:
            self.fh.close()
        else:
            pq.write_table(pa.concat_tables(self.parts), self.tmp, compression="snappy")
        os.replace(self.tmp, self.path)
        return os.path.getsize(self.path)


def _validate(spec: StreamSpec) -> None:
    """Check a spec's fields: one line naming the field and the value."""
    def integer(name, value, minimum):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if value < minimum:
            raise ValueError(f"{name} must be {'> 0' if minimum == 1 else f'>= {minimum}'}, got {value!r}")

    for name, minimum in (("events", 1), ("partitions", 1), ("keys", 1), ("files", 1), ("seed", 0)):
        integer(name, getattr(spec, name), minimum)
    if spec.files > spec.events:
        raise ValueError(f"files must be <= events (every file holds at least one event), "
                         f"got files={spec.files}, events={spec.events}")
    if spec.fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {spec.fmt!r}")
    if spec.shape not in SHAPES:
        raise ValueError(f"shape must be one of {SHAPES}, got {spec.shape!r}")
    rate = spec.rate
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not math.isfinite(rate) or rate <= 0:
        raise ValueError(f"rate must be a finite number > 0 (events per second), got {rate!r}")
    if not isinstance(spec.start, str):
        raise TypeError(f"start must be an ISO-8601 string like '2024-01-01T00:00:00Z', got {spec.start!r}")
    try:
        year = datetime.fromisoformat(spec.start).year
    except ValueError:
        raise ValueError(f"start must be an ISO-8601 time like '2024-01-01T00:00:00Z', got {spec.start!r}") from None
    if not 1971 <= year <= 9000:
        raise ValueError(f"start must be between 1971 and 9000, got {spec.start!r}")

"""The replay engine: journal rows and a policy in, decisions, windows, dead letters, watermark
timeline and metrics out. Functions from DataFrames to DataFrames; no I/O, no clock."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from replay.engine import idle, job_sql, kernels, metrics, one_pass, sessions, watermarks, windows
from replay.engine.decisions import NEG, RECORDS, last_reason
from replay.model.jobs import Job
from replay.model.policy import Policy
from replay.model.state import ScopeState, State

DECISION_SCHEMA = ("seq long, partition int, offset long, kind string, action string, reasons array<string>, "
                   "timestamp timestamp, watermark timestamp, output_watermark timestamp, arrival_time timestamp, "
                   "key string, value double, partition_watermark timestamp")


@dataclass
class Outputs:
    decided: DataFrame | Callable[[], DataFrame]  # every decided row (`decisions`), or how to build them
    windows: DataFrame
    dead_letters: DataFrame
    watermarks: DataFrame
    hourly: Callable[[], DataFrame]  # the metrics, built when asked for (`metrics`)
    cached: list[DataFrame] = field(default_factory=list)  # persisted intermediates, freed by unpersist()
    state: State | None = None  # the engine's state after the last row
    stored: DataFrame | None = None  # the decisions a target stores (`exceptions`); None: those of `decisions`
    arrivals: Callable[[], tuple[int | None, int | None]] | None = None  # the first and last arrival decided
    partials: list | None = None  # a live batch's metric counts and timeline steps, for its flush (`scope_ends`)

    @cached_property
    def decisions(self) -> DataFrame:
        """Every decided row (the decisions' full view): built on first use where it costs a run of its own (the one
        pass's `all` run, which a replay writing its target never reads)."""
        return self.decided() if callable(self.decided) else self.decided

    @property
    def exceptions(self) -> DataFrame:
        """The decisions with something to say: what the decisions table stores (issue 46)."""
        return self.stored if self.stored is not None else exceptions(self.decisions)

    def arrival_span(self) -> tuple[int | None, int | None]:
        """The first and the last arrival (microseconds; at least their hours) of the rows decided."""
        if self.arrivals is not None:
            return self.arrivals()
        r = self.decisions.agg(F.unix_micros(F.min("arrival_time")).alias("lo"),
                               F.unix_micros(F.max("arrival_time")).alias("hi")).first()
        return r["lo"], r["hi"]

    @cached_property
    def metrics(self) -> DataFrame:
        """Built on first use: a live batch and the conformance cases never read them, and building their plan
        (a dozen aggregates and joins, each call analysed again) cost 0.3-0.6 s per replay without a Spark job."""
        return self.hourly()

    def unpersist(self) -> None:
        for df in self.cached:
            df.unpersist()


def _instant(c: str) -> Column:
    """Microseconds -> UTC timestamp; -infinity -> null."""
    return F.when(F.col(c) > NEG, F.timestamp_micros(F.col(c)))


def _micros(c: str) -> Column:
    """UTC timestamp -> microseconds; null -> -infinity (the inverse of _instant)."""
    return F.coalesce(F.unix_micros(c), F.lit(NEG))


def decision_rows(decided: DataFrame, fields: tuple[str, ...] = ()) -> DataFrame:
    """The decisions table: a row per journal row, times as UTC timestamps, with the row's key and value
    and its partition's watermark (and a job's `fields`), so that every other output can be computed from this
    table alone."""
    return decided.select(
        "seq", "partition", "offset", "kind", "action", "reasons",
        _instant("timestamp").alias("timestamp"),
        _instant("watermark").alias("watermark"),
        _instant("output_watermark").alias("output_watermark"),
        F.timestamp_micros("arrival").alias("arrival_time"),
        "key", "value",
        _instant("wp").alias("partition_watermark"), *fields,
    )


def engine_rows(decisions: DataFrame) -> DataFrame:
    """The decisions table back in the engine's terms: times in microseconds, -infinity for none."""
    return decisions.select(
        "seq", "partition", "offset", "kind", "action", "reasons", "key", "value",
        F.unix_micros("timestamp").alias("timestamp"),
        F.unix_micros("arrival_time").alias("arrival"),
        _micros("partition_watermark").alias("wp"),
        _micros("output_watermark").alias("output_watermark"),
    )


def timeline_rows(steps: DataFrame) -> DataFrame:
    """The watermarks table's rows: `watermarks.timeline`'s steps, times as UTC timestamps."""
    return steps.select("partition", "seq", F.timestamp_micros("arrival").alias("arrival_time"),
                        _instant("wp").alias("watermark"), _instant("output_watermark").alias("output_watermark"))


@dataclass
class Prepared:
    """Journal rows the semantics act on (`prepare`), the DataFrames cached for them (free them when done) and,
    for a whole journal, what its first pass found: backward offsets (metrics.hourly's `backward`) and each
    chunk's watermark maxima (`watermarks.decide`'s `maxima`; None when something repeats)."""

    rows: DataFrame
    cached: list[DataFrame] = field(default_factory=list)
    backward: DataFrame | None = None
    maxima: list[tuple[int, int, int, int]] | None = None
    lying: watermarks.AsTheyLie | None = None  # with `maxima`: the rows of every kind, and the pass's stretches


def prepare(journal: DataFrame, history: DataFrame | None = None, whole: bool = False,
            policy: Policy | None = None, substream: Column | None = None,
            fields: tuple[tuple[str, str], ...] = (), distinct: bool = False) -> Prepared:
    """Journal rows the semantics act on (events, clocks and the source's punctuations), times in integer
    microseconds, with `duplicate`: a record (event or punctuation) whose (partition, offset) appeared at an earlier
    seq, in `journal` or in `history` (the journal rows before it, when `journal` continues from a checkpoint).
    `substream`: the value that names a row's substream (`substream_column`), as column `sub`. `fields`: a job's
    fields (name, expression), each a column of its events (null on other rows): computed in the journal's scan and
    carried through the passes, not joined to the decided rows afterwards by seq (a shuffle, or a broadcast of
    every event's fields). `distinct`: `journal`'s records repeat no (partition, offset) among themselves.

    Offsets usually rise in every partition: then nothing repeats. When `whole` (`journal` continues no earlier
    rows: no `history`, no state), one pass on the executors over the rows where they lie (`first_pass`) shows
    it, and gives the metrics their backward offsets and `policy`'s watermark its chunk maxima. Else repeated
    (partition, offset) pairs are found by one aggregation; they are usually few, so the rows meet them in a
    broadcast join."""
    source = journal if substream is None and not fields else job_sql.with_payload(journal)
    every = source.select(
        "seq", "partition", "offset", "kind",
        F.unix_micros("arrival_time").alias("arrival"),
        F.unix_micros("event_time").alias("et"),
        "key", "value", *([] if substream is None else [substream.alias("sub")]),
        *job_sql.event_fields(fields),
    )
    columns = (*_PREPARED, *([] if substream is None else ["sub"]), *(n for n, _ in fields))
    rows = every.where(_acted_on())
    no_repeats = rows.select(*columns, F.lit(False).alias("duplicate"))
    backward = None
    if whole:  # every kind: malformed rows leave no gaps in seq to cut the pass's stretches at
        all_kinds = every.select(*columns, F.lit(False).alias("duplicate"))
        found = first_pass(all_kinds, policy)
        backward = backward_table(journal.sparkSession, found.steps)
        if not found.steps:  # no offset at or below its partition's previous one: none repeats
            lying = None if found.maxima is None else watermarks.AsTheyLie(
                all_kinds.withColumn("row", _acted_on()), found.stretches)
            return Prepared(no_repeats, [], backward, found.maxima, lying)
    if distinct and history is None:  # nothing to repeat: no aggregation (a Spark job per job of a live batch)
        return Prepared(no_repeats, [], backward)
    events = rows.where(_record()).select("partition", "offset", "seq")
    if history is not None:
        earlier = (history.where(_record()).select("partition", "offset", "seq")
                   .join(events.select("partition", "offset"), ["partition", "offset"], "left_semi"))
        events = events.unionByName(earlier)
    firsts = (events.groupBy("partition", "offset").agg(F.min("seq").alias("_first"), F.count("*").alias("_n"))
              .where(F.col("_n") > 1).drop("_n").persist())
    repeated = firsts.count()
    if repeated == 0:
        firsts.unpersist()
        return Prepared(no_repeats, [], backward)
    table = F.broadcast(firsts) if repeated <= BROADCAST_REPEATS else firsts
    duplicate = _record() & F.coalesce(F.col("seq") > F.col("_first"), F.lit(False))
    decided = rows.join(table, ["partition", "offset"], "left").select(*columns, duplicate.alias("duplicate"))
    return Prepared(decided, [firsts], backward)


def first_pass(rows: DataFrame, policy: Policy | None = None, chunk_rows: int | None = None) -> kernels.FirstPass:
    """`kernels.chunk_pass` of journal rows (seq, partition, offset, kind, arrival, ...; none a duplicate) where
    they lie, cut into the watermark pass's chunks (of `chunk_rows`) and the files they were read from, hours as
    metrics.hourly truncates them: the events' offset steps, and the chunk (and stretch) maxima of `policy`'s
    watermark terms over events and clocks (maxima None without a policy, or for punctuations, which are not
    maxima of the rows). Rows of other kinds only join up the seq."""
    terms = policy is not None and not policy.punctuated
    if terms:
        rows = watermarks.contributions(rows, policy)
        floor, events = F.col("floor_c"), F.col("event_c")
    else:
        floor = events = F.lit(NEG)
    columns = (  # as the JVM operator reads them (`FirstPass`): every one typed and never null
        (watermarks.chunk_column(chunk_rows), "chunk", "int"), (F.xxhash64(F.input_file_name()), "file", "long"),
        (F.coalesce("partition", F.lit(-1)), "partition", "int"), (F.col("seq"), "seq", "long"),
        (F.coalesce("offset", F.lit(0)), "offset", "long"),
        (F.coalesce(F.unix_micros(F.date_trunc("hour", F.timestamp_micros("arrival"))), F.lit(0)), "hour", "long"),
        (F.coalesce(_record(), F.lit(False)), "event", "boolean"),
        (F.coalesce(_acted_on(), F.lit(False)), "row", "boolean"),
        (F.coalesce(floor, F.lit(NEG)), "floor", "long"), (F.coalesce(events, F.lit(NEG)), "events", "long"),
    )
    found = kernels.chunk_pass(rows.select(*(c.cast(t).alias(n) for c, n, t in columns)))
    return found if terms else replace(found, maxima=None)


def _acted_on() -> Column:
    """The journal rows the semantics act on: events, clocks and punctuations (not malformed or empty landing
    lines)."""
    return F.col("kind").isin("event", "clock", "punctuation")


def _record() -> Column:
    """The source's records, each with the broker's (partition, offset) identity: events and punctuations (a
    redelivered punctuation is applied once, like an event)."""
    return F.col("kind").isin(*RECORDS)


def substream_column(job: Job) -> Column | None:
    """What names an event's substream: `key`, or the job's field `substream_by` names (as a string, so every
    field's values compare alike); None without substreams."""
    name = job.policy.substream_by
    if name is None or name == "key":
        return None if name is None else F.col("key")
    return F.expr(dict(job.fields)[name]).cast("string")


def backward_table(spark, steps: list[tuple[int, int, int, int]]) -> DataFrame:
    """`kernels.chunk_pass`'s offset steps as metrics.hourly's `backward`: per partition and hour, when any."""
    rows = [(p, h, b) for p, h, b, _ in steps if b]
    return spark.createDataFrame(rows, "partition int, hour long, backward_offsets long").select(
        "partition", F.timestamp_micros("hour").alias("hour"), "backward_offsets")


# rows of a live batch up to which its metric counts and timeline steps are collected for the flush: a catch-up
# batch's steps (one per partition and second of event time) could fill the driver; its flush decides them again
PARTIALS_AT_MOST = 50_000
BROADCAST_REPEATS = 1_000_000  # repeated (partition, offset) pairs up to which they are broadcast to the rows


_PREPARED = ("seq", "partition", "offset", "kind", "arrival", "et", "key", "value")


@dataclass(frozen=True)
class Counted:
    """What a live batch's reads (`jobs.live.lag.reads`) counted of its rows before they are decided: whether its
    records repeat no (partition, offset) among themselves, the partitions of the rows the semantics act on, and its
    first and last seq. The engine then skips the Spark jobs that would count these again for every job: the
    duplicate check (without `history`) and, for rows of one chunk, the watermark terms' maxima before the pass."""

    distinct: bool
    partitions: tuple[int, ...]
    seqs: tuple[int, int]

    def chunk(self) -> int | None:
        """The one chunk of the watermark pass the rows lie in (None: they span two)."""
        lo, hi = (seq // watermarks.CHUNK_ROWS for seq in self.seqs)
        return lo if lo == hi else None


@dataclass(frozen=True)
class Continuing:
    """Where journal rows continue from: a checkpoint's `state` and the journal rows before them (`history`, where
    earlier copies of a (partition, offset) are); `keep_state` also computes the state after them (the next batch's);
    `counted`: what the caller counted of the rows already (a live batch)."""

    state: State | None = None
    history: DataFrame | None = None
    keep_state: bool = False
    counted: Counted | None = None

    @property
    def distinct(self) -> bool:
        """Whether the rows' records are known to repeat no (partition, offset) among themselves."""
        return self.counted is not None and self.counted.distinct

    @classmethod
    def after(cls, journal: DataFrame, state: State | None) -> tuple[DataFrame, "Continuing"]:
        """The journal rows after a checkpoint's `state` (all of them without one), and where they continue from."""
        if state is None:
            return journal, cls()
        return journal.where(F.col("seq") > state.seq), cls(state, journal.where(F.col("seq") <= state.seq))


def _open_windows_only(c: Continuing, policy: Policy) -> Continuing:
    """`c` with its state's rows of windows that state had closed left out (`windows.without_closed`)."""
    return c if c.state is None else replace(c, state=windows.without_closed(c.state, policy))


def replay(journal: DataFrame, job: Job, *, flush: bool = True, since_seq: int | None = None,
           materialize: Callable[[DataFrame], DataFrame] | None = None, partitions: list[int] | None = None,
           rows_at_most: int | None = None, continuing: Continuing | None = None) -> Outputs:
    """Run the spec for `job` over `journal` (rows with seq, partition, offset, kind, arrival_time, event_time,
    key, value). `flush`: the journal is complete, so open windows are flushed (if the policy says so).
    `since_seq`: keep only outputs of rows from this seq on (the history before it still counts).
    `materialize`: how the decisions (decision_rows), which every other output reads, are kept (default:
    persisted); the runner writes them as the decisions table and reads that back.
    `partitions`: the partitions of the source, when known up front (else: those with rows).
    `rows_at_most`: a bound on `journal`'s rows, when the caller knows one (a live batch): outputs sized by
    it are not counted first. `continuing`: a live batch, or a replay from a checkpoint (`Outputs.state` is then
    the state after the rows, when asked for)."""
    policy, c = job.policy, _open_windows_only(continuing or Continuing(), job.policy)
    if policy.sessions and policy.idle_timeout is not None and not job.windows_every_event_by_key:
        raise ValueError(f"{job.describe()}: idle_timeout with session windows needs a job without where, group_by "
                         "or transform (Job.define refuses it)")
    state = c.state or State()
    if one_pass.applies(policy):
        return _replay_in_one_pass(journal, job, flush, since_seq, partitions, rows_at_most, c)
    decided = _decide(journal, job, c, partitions)
    if decided is None:
        return _empty(journal, state, materialize, None if job.is_spec else job)
    prepared, d, scopes_before, full, raised, rows, cached = decided
    if materialize is None:
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(rows)
    else:
        rows = materialize(rows)
    full = engine_rows(rows)
    win, dead, still_open = _windows_and_dead(journal, rows, full, job, flush, state, since_seq, cached,
                                              _untimed_punctuations(prepared.rows))
    dead = dead.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(dead)
    before = {p: v.wp for p, v in state.partitions.items()}
    # over every row decided (the steps reached before `since_seq` are on the timeline already), then the range's:
    # a range's first row in a partition is no new step unless the whole replay's is one
    timeline = timeline_rows(_in_range(watermarks.timeline(full, before=before), since_seq))
    if c.keep_state and policy.sessions and still_open is not None:
        # the next stretch reads these rows several times (sessions, bounds, idle): their plan would nest the
        # state's plan as often, batch after batch; computed once here, it starts afresh
        still_open = still_open.localCheckpoint(eager=True)
    after = _state_after(full, policy, d, state, scopes_before, raised, still_open) if c.keep_state else None
    decisions = _in_range(rows, since_seq)
    # the metrics count dead letters, which need no raw text: they skip the join with the journal
    backward = prepared.backward if since_seq is None else None
    return Outputs(decisions, win, _with_raw(dead, journal, rows_at_most), timeline,
                   lambda: metrics.hourly(decisions, dead, backward), cached, after)


def _replay_in_one_pass(journal: DataFrame, job: Job, flush: bool, since_seq: int | None,
                        partitions: list[int] | None, rows_at_most: int | None, c: Continuing) -> Outputs:
    """`replay` of a policy the one pass decides (`one_pass.applies`): the `decide` run gives the exceptions and the
    partial aggregates (kept, they are small), the `members` or `kept` run what the windows aggregate; every row's
    decision (`Outputs.decisions`) is a run of its own, made only when read."""
    policy, state = job.policy, c.state or State()
    found = _one_pass(journal, job, c, partitions)
    if found is None:
        return _empty(journal, state, None, None if job.is_spec else job)
    p, prepared = found
    cached = list(prepared.cached)
    before = {q: v.wp for q, v in state.partitions.items()}
    steps_before = {q: w // kernels.RESOLUTION for q, w in before.items() if w > NEG}
    ran = p.run("decide", since_seq, steps_before).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(ran)
    # runs the pass: one Spark job over the rows; a small live batch's partials come with it (`Outputs.partials`)
    small = c.keep_state and rows_at_most is not None and rows_at_most <= PARTIALS_AT_MOST
    held = state.windows if policy.window is not None else None  # their index range: found in the same job
    found_ends = one_pass.scope_ends(ran, small, terms=p.starts.after is None, held=held)
    ends, span = found_ends.scopes, found_ends.span
    carried = job.field_names

    def decisions() -> DataFrame:
        return _in_range(one_pass.decision_rows(p.run("all"), carried), since_seq)

    decided = one_pass.decision_rows(one_pass.tagged(ran, one_pass.DECIDED))  # the exceptions, from `since_seq`
    dropped = decided.where(F.col("action").isin("dropped", "quarantined")).select(
        "seq", "partition", "offset", last_reason().alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"), "arrival_time")
    untimed = one_pass.tagged(ran, one_pass.UNTIMED).select(
        "seq", "partition", "offset", F.lit("malformed").alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"), F.timestamp_micros("arrival").alias("arrival_time"))
    malformed = _in_range(_malformed(journal), since_seq).unionByName(untimed)
    win, closed, still_open, added = _windows_in_one_pass(p, ran, journal, span, flush, since_seq, c.keep_state,
                                                          cached, found_ends.held_range)
    dead = (dropped if closed is None else dropped.unionByName(closed)).unionByName(malformed)
    dead = dead.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(dead)
    timeline = timeline_rows(_in_range(watermarks.timeline(one_pass.timeline_steps(ran), before=before), since_seq))
    after = None
    if c.keep_state:
        scopes_before = {s: state.scope(s) for s in _scopes(policy, p.starts.wp_start.values)}
        partitions_after = p.starts.after
        if partitions_after is None:  # from the pass's own maxima of the two terms (`one_chunk_starts`)
            maxima = [(p.starts.start.first, q, f, e) for q, f, e in found_ends.terms]
            partitions_after = watermarks.after_maxima(maxima, sorted(p.starts.wp_start.values), state)
        after = replace(_state_from(ends, {}, partitions_after, state, scopes_before, still_open, None),
                        windows_added=added)
    backward = prepared.backward if since_seq is None else None

    def hourly() -> DataFrame:
        found = backward if backward is not None else metrics.backward_of(decisions())
        return metrics.from_partials(one_pass.metric_partials(ran), dead, found)

    return Outputs(decisions, win, _with_raw(dead, journal, rows_at_most), timeline, hourly, cached, after,
                   stored=one_pass.with_fields(decided, journal, job), arrivals=lambda: one_pass.arrival_span(ran),
                   partials=found_ends.partials)


def _windows_in_one_pass(p: one_pass.Pass, ran: DataFrame, journal: DataFrame, span: tuple[int | None, int | None],
                         flush: bool, since_seq: int | None, keep_state: bool, cached: list[DataFrame],
                         held_range: tuple[int | None, int | None] | None = None):
    """(windows, `window_closed` dead letters, windows still open, the rows of those that these rows added
    (`State.windows_added`: a job's members, else None); all but the first None without a window) of the one pass:
    the spec's from its members run, a job's from its kept events with its own Spark SQL; the close points from
    the decide run's partials (`ran`), and the missed windows too where the job takes its kept events as they are
    (`Pass.closed_here`). `held_range`: the state's open windows' index range (`one_pass.scope_ends`)."""
    job, state = p.job, p.state
    policy = job.policy
    if policy.window is None:
        return _no_windows(journal), None, None, None
    closes = windows.closes_of(one_pass.close_firsts(ran), span, policy, state, held_range).persist()
    flushing = flush and policy.flush_at_end

    def once(df: DataFrame) -> DataFrame:  # the windows and the open ones after them both read it: computed once
        if not keep_state:
            return df
        df = df.persist()
        cached.append(df)
        return df

    if job.is_spec:  # its members, each in the windows it did not miss (the missed ones: the decide run's)
        # a row per member, counted with the state's open windows in one aggregation (`emitted`)
        counted = one_pass.members(p.run("members"), policy).select(
            "scope", "group_key", "k", F.lit(1).cast("long").alias("count"),
            F.col("value").cast("decimal(38,12)").alias("sum"))
        win, still_open = windows.emitted(counted, closes, policy, flushing, state, once)
        w = windows.WindowResults(win, None, closes, still_open)
    else:
        kept = one_pass.decision_rows(p.run("kept"), job.field_names)
        if not p.closed_here:  # the missed windows read them too
            kept = once(kept)
        events = job_sql.decided_events(kept, job)
        w = windows.job_windows(None, events, policy, job.grouping, job.aggregates, flushing, state, closes, once)
    cached.append(w.closes)
    win = w.windows
    if since_seq is not None:
        win = win.where(F.col("emitted_at").isNull() | (F.col("emitted_at") >= since_seq))
    if p.closed_here:  # found by the decide run already (from `since_seq`): the kept events are not read again
        closed = one_pass.window_closed(ran, journal, job)
    else:
        closed = _in_range(w.closed, since_seq)
    return win, closed, w.open, w.added


def _one_pass(journal: DataFrame, job: Job, c: Continuing, partitions: list[int] | None):
    """The decide pass over `journal` (`one_pass.Pass`) and the prepared rows it reads; None without rows."""
    policy, state = job.policy, c.state or State()
    counted = c.counted
    prepared = prepare(journal, c.history, c.state is None and c.history is None, policy, None, job.fields,
                       c.distinct)
    rows = prepared.rows.withColumn("chunk", watermarks.chunk_column())
    chunk = counted.chunk() if counted is not None and counted.partitions else None
    if chunk is not None and prepared.maxima is None:  # the pass finds the state after the rows (`after_maxima`)
        starts = watermarks.one_chunk_starts(rows, state, partitions, counted.partitions, chunk)
    else:
        starts = watermarks.bounded_starts(rows, policy, state, partitions, prepared.maxima, prepared.lying)
    if starts is None:
        for df in prepared.cached:
            df.unpersist()
        return None
    return one_pass.Pass(starts, job, state), prepared


def decide(journal: DataFrame, job: Job, *, since_seq: int | None = None, partitions: list[int] | None = None,
           continuing: Continuing | None = None) -> tuple[DataFrame, list[DataFrame]] | None:
    """The decisions alone (spec 3 and 4, the watermarks and the output watermark; no windows, no writes), as
    `replay` computes them: the rows a target stores only as its exceptions are derived from these
    (`replay.ops.outputs`). With the DataFrames cached for them (free them when done); None without rows."""
    c = _open_windows_only(continuing or Continuing(), job.policy)
    if one_pass.applies(job.policy):
        found = _one_pass(journal, job, c, partitions)
        if found is None:
            return None
        p, prepared = found
        rows = one_pass.decision_rows(p.run("all"), job.field_names)
        return _in_range(rows, since_seq), list(prepared.cached)
    decided = _decide(journal, job, c, partitions)
    if decided is None:
        return None
    rows, cached = decided[5], decided[6]
    return _in_range(rows, since_seq), cached


def exceptions(decisions: DataFrame) -> DataFrame:
    """The decisions with something to say (issue 46): an event with a reason, or one not accepted as it came.
    What a target stores; every other row follows from the journal and the policy (`decide`)."""
    return decisions.where(exceptional())


def exceptional() -> Column:
    """The condition `exceptions` keeps rows by."""
    return (F.col("kind") == "event") & ((F.col("action") != "accepted") | (F.size("reasons") > 0))


def _decide(journal: DataFrame, job: Job, c: Continuing, partitions: list[int] | None):
    """Steps 1-4 and the output watermark over `journal`: (prepared, decided, scopes before, the engine's rows with
    their output watermark, what raises it, the decision rows, the cached DataFrames), or None without rows."""
    policy, state = job.policy, c.state or State()
    prepared = prepare(journal, c.history, c.state is None and c.history is None, policy, substream_column(job),
                       job.fields, c.distinct)
    carried = job.field_names
    d = watermarks.decide(prepared.rows, policy, state, partitions, prepared.maxima, prepared.lying, carried)
    if d is None:
        for df in prepared.cached:
            df.unpersist()
        return None
    cached = [d.rows, *prepared.cached]
    scopes_before = {s: state.scope(s) for s in _scopes(policy, d.wp_start.values)}
    full, raised = _with_output_watermark(d, policy, state, scopes_before, cached)
    rows = decision_rows(full, carried)  # the decisions table carries the job's fields
    return prepared, d, scopes_before, full, raised, rows, cached


def _in_range(df: DataFrame, since_seq: int | None) -> DataFrame:
    return df if since_seq is None else df.where(F.col("seq") >= since_seq)


def _with_output_watermark(d: watermarks.Decided, policy: Policy, state: State, scopes_before: dict[int, ScopeState],
                           cached: list[DataFrame]) -> tuple[DataFrame, DataFrame | None]:
    """The decided rows with their output watermark; with an idle timeout, what raises it (spec 6) too."""
    decided = d.rows
    if policy.idle_timeout is not None and policy.window is not None:
        decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(decided)
        if policy.sessions:  # which sessions are open depends on the raises before: one pass builds both
            plain = watermarks.output_watermark(decided, policy, d.wp_start)
            group = F.col("key") if policy.group_by_key else F.lit(None).cast("string")
            raised = sessions.idle_raises(plain, policy, windows.scope_column(policy), group, state).persist()
        else:
            raised = idle.raises(decided, policy, _idle_before(state, scopes_before, policy)).persist()
        cached.append(raised)
        decided = decided.join(F.broadcast(raised), "seq", "left").fillna(NEG, ["raise"])
        raise_start = watermarks.raise_starts(raised, d.wp_start, scopes_before.get(windows.MERGED, ScopeState()).raised)
    else:
        raised, raise_start = None, None  # no idle timeout: nothing raises the output watermark
    full = watermarks.output_watermark(decided, policy, d.wp_start, raise_start,
                                       {s: v.raised for s, v in scopes_before.items()})
    return full, raised


def _untimed_punctuations(prepared: DataFrame) -> DataFrame:
    """Punctuations the source sent without a valid time (not redeliveries): `malformed` dead letters (spec 4).
    Found among the prepared rows, not the decided ones: a filter does not pass through the watermark pass's
    operator, so from the decided rows it would run that pass over every row again."""
    bad = (F.col("kind") == "punctuation") & F.col("et").isNull() & ~F.col("duplicate")
    return prepared.where(bad).select(
        "seq", "partition", "offset", F.lit("malformed").alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"), F.timestamp_micros("arrival").alias("arrival_time"))


def _windows_and_dead(journal: DataFrame, rows: DataFrame, full: DataFrame, job: Job, flush: bool, state: State,
                      since_seq: int | None, cached: list[DataFrame],
                      untimed: DataFrame) -> tuple[DataFrame, DataFrame, DataFrame | None]:
    """The windows (spec 5), the dead letters without their raw text (dropped, closed-window and malformed rows,
    `untimed` punctuations among them), and the windows still open after the rows."""
    policy = job.policy
    dropped = _in_range(full, since_seq).where(F.col("action").isin("dropped", "quarantined")).select(
        "seq", "partition", "offset", last_reason().alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"),
        F.timestamp_micros("arrival").alias("arrival_time"),
    )
    malformed = _in_range(_malformed(journal).unionByName(untimed), since_seq)
    if policy.window is None:
        return _no_windows(journal), dropped.unionByName(malformed), None
    flushing = flush and policy.flush_at_end
    if policy.sessions:
        w = _sessions(rows, full, job, flushing, state)
    elif job.is_spec:  # the spec's shape: windows continue from a checkpoint's partial counts and sums
        w = windows.windows_and_closed(full, policy, flushing, state)
    else:
        w = windows.job_windows(full, job_sql.decided_events(rows, job), policy, job.grouping, job.aggregates,
                                flushing, state)
    cached.append(w.closes)
    win, closed = w.windows, w.closed
    if since_seq is not None:
        win = win.where(F.col("emitted_at").isNull() | (F.col("emitted_at") >= since_seq))
        closed = closed.where(F.col("seq") >= since_seq)
    return win, dropped.unionByName(closed).unionByName(malformed), w.open


def _sessions(rows: DataFrame, full: DataFrame, job: Job, flush: bool, state: State) -> windows.WindowResults:
    """Session windows (spec 5): the spec's count and sum per key, or a user job's aggregates per its groups."""
    policy = job.policy
    if job.is_spec:
        members = full.where(F.col("timestamp").isNotNull() & (F.col("kind") == "event")).select(
            "seq", "partition", "offset", F.timestamp_micros("timestamp").alias("timestamp"),
            F.timestamp_micros("arrival").alias("arrival_time"),
            (F.col("key") if policy.group_by_key else F.lit(None).cast("string")).alias("key"), "value")
        # decimal sums are exact, so the result does not depend on how rows were partitioned
        aggregates = [("count", F.count("*")), ("sum", F.sum(F.col("value").cast("decimal(38,12)")))]
        grouping = ["key"]
    else:
        members = job_sql.decided_events(rows, job)
        aggregates = [(n, F.expr(e)) for n, e in job.aggregates]
        grouping = list(job.grouping)
    built = sessions.build(full, members, policy, windows.scope_column(policy), grouping, aggregates, flush, state)
    win = built.windows
    if job.is_spec:
        win = win.select("window_start", "window_end", "key", "partition", "count",
                         F.col("sum").cast("double").alias("sum"), "emitted_at")
    return windows.WindowResults(win, built.closed, built.steps, built.open)


def _scopes(policy: Policy, partitions) -> list[int]:
    return list(partitions) if policy.independent else [windows.MERGED]


def _idle_before(state: State, scopes: dict[int, ScopeState], policy: Policy) -> dict:
    """Per output scope: the latest event arrival and the ends of the open windows (idle.raises)."""
    w, ends = policy.window, {}
    if state.windows is not None:  # open windows are few (they close as the watermark passes): collected
        for r in state.windows.select("scope", "k").distinct().collect():
            ends.setdefault(r["scope"], []).append(w.offset + r["k"] * w.hop + w.size)
    return {s: (v.last_event, ends.get(s, [])) for s, v in scopes.items()}


def _state_after(full: DataFrame, policy: Policy, d: watermarks.Decided, state: State,
                 scopes_before: dict[int, ScopeState], raised: DataFrame | None, still_open: DataFrame | None) -> State:
    """The state after the last row: partitions from the watermark pass, scopes from one small aggregate."""
    scope = windows.scope_column(policy)
    is_event = F.col("kind") == "event"
    ends = full.groupBy(scope.alias("scope")).agg(
        F.max("seq").alias("seq"), F.max("output_watermark").alias("owm"),
        F.max(F.when(is_event, F.col("arrival"))).alias("last_event"),
    ).collect()
    raises = {}
    if raised is not None:
        joined = raised.join(full.select("seq", scope.alias("scope")), "seq")
        raises = {r["scope"]: r["r"] for r in joined.groupBy("scope").agg(F.max("raise").alias("r")).collect()}
    ends = {r["scope"]: one_pass.ScopeEnd(r["seq"], r["owm"], r["last_event"]) for r in ends}
    return _state_from(ends, raises, d.partitions, state, scopes_before, still_open, d.keys)


def _state_from(ends: dict[int, one_pass.ScopeEnd], raises: dict[int, int], partitions: dict, state: State,
                scopes_before: dict[int, ScopeState], still_open: DataFrame | None, keys: DataFrame | None) -> State:
    """The state after the rows: each scope's end (and idle raise) over its state before, the partitions after them,
    the windows still open and the substreams' maxima."""
    scopes = dict(scopes_before)
    for s, e in ends.items():
        before = scopes_before.get(s, ScopeState())
        last = [v for v in (before.last_event, e.last_event) if v is not None]
        scopes[s] = ScopeState(owm=max(before.owm, e.owm), raised=max(before.raised, raises.get(s, NEG)),
                               last_event=max(last) if last else None)
    return State(seq=max(e.seq for e in ends.values()), partitions={**state.partitions, **partitions}, scopes=scopes,
                 windows=still_open, keys=keys if keys is not None else state.keys)


def _malformed(journal: DataFrame) -> DataFrame:
    """Landing rows that could not be placed are dead letters too, with their raw text and where they came
    from (landing file and line), so they can be found and repaired: nothing is lost."""
    return journal.where(F.col("kind") == "malformed").select(
        "seq", "partition", "offset", F.lit("malformed").alias("reason"),
        F.lit(None).cast("timestamp").alias("window_start"), "arrival_time",
    )


def _with_raw(dead: DataFrame, journal: DataFrame, rows_at_most: int | None) -> DataFrame:
    """Dead letters keep what was read and where: `source`, `source_line` and `payload` (the raw text the
    journal kept for a malformed row or an event without a valid event time; else the journal row as JSON).
    They are usually few: counted first (`dead` is persisted by the caller), up to BROADCAST_DEAD they are
    broadcast to the journal's rows, whose payloads then stay where they are instead of being shuffled for a
    join. Each is a journal row, so `rows_at_most` bounds them too: no count then."""
    # the journal row as JSON is built after the join: on the dead letters, not on every journal row
    parts = ("partition", "offset", "arrival_time", "event_time", "key", "value")
    raw = journal.select("seq", "payload", "kind", *(F.col(c).alias(f"_{c}") for c in parts), "source", "source_line")
    row = F.to_json(F.struct(*(F.col(f"_{c}").alias(c) for c in parts)))
    payload = F.coalesce("payload", F.when(_record(), row)).alias("payload")
    few = rows_at_most is not None and rows_at_most <= BROADCAST_DEAD
    if not few and dead.count() > BROADCAST_DEAD:
        joined = dead.join(raw, "seq", "left")
    else:  # every dead letter is a journal row (seq is unique there): the inner join keeps them all
        joined = raw.join(F.broadcast(dead), "seq")
    return joined.select(*dead.columns, payload, "source", "source_line")


BROADCAST_DEAD = 1_000_000  # dead letters up to which they are broadcast to the journal for their raw text


def _no_windows(journal: DataFrame) -> DataFrame:
    spark = journal.sparkSession
    return spark.createDataFrame([], WINDOW_SCHEMA)


WINDOW_SCHEMA = (
    "window_start timestamp, window_end timestamp, key string, partition int, count long, sum double, emitted_at long"
)


def _empty(journal: DataFrame, state: State, materialize: Callable[[DataFrame], DataFrame] | None,
           job: Job | None = None) -> Outputs:
    spark = journal.sparkSession
    decisions = spark.createDataFrame([], DECISION_SCHEMA)
    if job is not None and job.fields:  # a user job's tables have its columns even when empty
        decisions = decisions.join(job_sql.fields(journal.limit(0), job), "seq", "left")
    if materialize is not None:  # kept like any other decisions (the runner writes them as the table)
        decisions = materialize(decisions)
    no_windows = _no_windows(journal)
    if job is not None and job.policy.sessions:
        no_windows = _sessions(decisions, engine_rows(decisions), job, True, State()).windows
    elif job is not None:
        no_windows = windows.job_windows(engine_rows(decisions), job_sql.decided_events(decisions, job),
                                         job.policy, job.grouping, job.aggregates, True).windows
    dead = _malformed(journal).persist(StorageLevel.MEMORY_AND_DISK)
    letters = _with_raw(dead, journal, None)
    timeline = spark.createDataFrame([], "partition int, seq long, arrival_time timestamp, watermark timestamp, "
                                         "output_watermark timestamp")
    return Outputs(decisions, no_windows, letters, timeline, lambda: metrics.hourly(decisions, dead), [dead],
                   state=state)

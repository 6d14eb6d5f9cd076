"""Per-event decisions (spec section 3) as column expressions: arrival checks, then the ordering check."""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from replay.jvm import once_per_jvm
from replay.model.policy import Policy

# -infinity for watermarks, in microseconds; far below any real instant and safe to subtract from.
from replay.model.state import NEG  # noqa: E402,F401  (defined with the state; the engine's modules import it here)


RECORDS = ("event", "punctuation")  # the source's records: each has the broker's (partition, offset) identity


def source_punctuation() -> Column:
    """A punctuation the source sent (spec 4), applied: a valid time (`et`) and not a redelivery (`duplicate`).
    One without a valid time is a `malformed` dead letter; its row still counts for the arrival floor."""
    return (F.col("kind") == "punctuation") & F.col("et").isNotNull() & ~F.col("duplicate")


def arrival_checks(rows: DataFrame, policy: Policy) -> DataFrame:
    """Steps 1-3, which need only the row itself: quarantine, early, late.

    Adds `quarantined`, `early`, `late` (booleans), `passed` (the event goes on to the ordering
    check) and `t` (its time after steps 2-3, microseconds). Quarantined: an invalid event time, or a
    `duplicate` (its (partition, offset) appeared at an earlier seq: the broker's identity of an event,
    so the first copy wins), which is decided first. With `timestamp_by: arrival_time`: `_by_arrival`.
    """
    if policy.by_arrival:
        return _by_arrival(rows)
    is_event = F.col("kind") == "event"
    arrival, et = F.col("arrival"), F.col("et")
    quarantined = is_event & (et.isNull() | F.col("duplicate"))
    E, L = policy.early_arrival_tolerance, policy.late_arrival_tolerance
    early = F.lit(False) if E is None else is_event & ~quarantined & (et > arrival + E)
    t1 = et
    early_drop = F.lit(False)
    if E is not None:
        if policy.early_arrival_action == "adjust":
            t1 = F.when(early, arrival + E).otherwise(et)
        else:
            early_drop = early
    late = F.lit(False) if L is None else is_event & ~quarantined & ~early_drop & (t1 < arrival - L)
    t2 = t1
    late_drop = F.lit(False)
    if L is not None:
        if policy.late_arrival_action == "adjust":
            t2 = F.when(late, arrival - L).otherwise(t1)
        elif policy.late_arrival_action == "drop":
            late_drop = late
    passed = is_event & ~quarantined & ~early_drop & ~late_drop
    return rows.select(
        "*",
        quarantined.alias("quarantined"),
        early.alias("early"),
        late.alias("late"),
        passed.alias("passed"),
        F.when(passed, t2).alias("t"),
    )


def _by_arrival(rows: DataFrame) -> DataFrame:
    """`timestamp_by: arrival_time`: the event's time is its arrival, so step 1 has a time even when the
    `event_time` column is null or unparseable (such an event is not quarantined; only a `duplicate` is), and
    steps 2-3 never fire: t = arrival."""
    is_event = F.col("kind") == "event"
    quarantined = is_event & F.col("duplicate")
    passed = is_event & ~quarantined
    return rows.select(
        "*",
        quarantined.alias("quarantined"),
        F.lit(False).alias("early"),
        F.lit(False).alias("late"),
        passed.alias("passed"),
        F.when(passed, F.col("arrival")).alias("t"),
    )


def ordering_check(rows: DataFrame, policy: Policy) -> DataFrame:
    """Step 4 and the result: needs `w_before`, the scope watermark after the previous row.

    Adds `out_of_order`, `action`, `reasons` and `timestamp` (microseconds, null unless kept). With
    `timestamp_by: arrival_time` step 4 never fires, even for an arrival behind the watermark (an arrival
    earlier than one before it in the partition): the spec keeps every event at its arrival time.
    """
    ooo = F.lit(False) if policy.by_arrival else F.col("passed") & (F.col("t") < F.col("w_before"))
    ooo_action = policy.out_of_order_action
    ooo_drop = ooo if ooo_action == "drop" else F.lit(False)
    kept = F.col("passed") & ~ooo_drop
    ts = F.when(ooo, F.col("w_before")).otherwise(F.col("t")) if ooo_action == "adjust" else F.col("t")
    adjusted = (
        (F.col("early") & F.lit(policy.early_arrival_action == "adjust"))
        | (F.col("late") & F.lit(policy.late_arrival_action == "adjust"))
        | (ooo & F.lit(ooo_action == "adjust"))
    )
    action = (
        F.when(F.col("kind") != "event", F.lit(None))
        .when(F.col("quarantined"), "quarantined")
        .when(~kept, "dropped")
        .when(adjusted, "adjusted")
        .otherwise("accepted")
    )
    return rows.select(
        "*",
        ooo.alias("out_of_order"),
        action.alias("action"),
        _reasons(ooo).alias("reasons"),
        F.when(kept, ts).alias("timestamp"),
    )


def _reasons(ooo: Column) -> Column:
    """Reasons in check order; clock rows have none (null), events an array, maybe empty. A concat of
    one-element arrays, which Spark compiles (a filter over an array would run a lambda per row)."""
    none = F.array().cast("array<string>")
    named = [
        F.when(F.col("duplicate") & (F.col("kind") == "event"), F.array(F.lit("duplicate")))
        .when(F.col("quarantined"), F.array(F.lit("invalid_event_time"))).otherwise(none),
        F.when(F.col("early"), F.array(F.lit("early"))).otherwise(none),
        F.when(F.col("late"), F.array(F.lit("late"))).otherwise(none),
        F.when(ooo, F.array(F.lit("out_of_order"))).otherwise(none),
    ]
    return F.when(F.col("kind") == "event", F.concat(*named))


def last_reason() -> Column:
    """A dead letter's reason: the last of the event's reasons."""
    return F.element_at(F.col("reasons"), -1)


@once_per_jvm
def kind_code() -> Column:
    """`kind` as the JVM's decide pass reads it (a byte: a string costs most to buffer): 0 event, 1 clock, 2 a
    punctuation (other kinds are not acted on)."""
    return F.when(F.col("kind") == "event", 0).when(F.col("kind") == "clock", 1).otherwise(2).cast("byte")


def decoded(ran: DataFrame) -> DataFrame:
    """The decide pass's rows (`kernels.decide_pass`) with `kind`, `action` and `reasons` as the decisions spell them
    (the operator's codes: `Decide.java`); `timestamp` stays in microseconds, null unless the event is kept."""
    return ran.withColumns(_decoded_columns())


@once_per_jvm
def _decoded_columns() -> dict[str, Column]:
    code, a, bits = F.col("kind"), F.col("action"), F.col("reasons")
    action = F.when(a == 0, "accepted").when(a == 1, "adjusted").when(a == 2, "dropped").when(a == 3, "quarantined")
    none = F.array().cast("array<string>")

    def named(bit: int, name: str) -> Column:
        return F.when(bits.bitwiseAND(bit) != 0, F.array(F.lit(name)))

    reasons = F.concat(  # in check order (`_reasons`)
        F.coalesce(named(1, "duplicate"), named(2, "invalid_event_time"), none),
        F.coalesce(named(4, "early"), none), F.coalesce(named(8, "late"), none),
        F.coalesce(named(16, "out_of_order"), none))
    return {"kind": F.when(code == 0, "event").when(code == 1, "clock").otherwise("punctuation"),
            "action": action, "reasons": F.when(code == 0, reasons)}

package retrace.engine;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Spec sections 3 and 4 for the bounded (and source) watermark without substreams, in one pass on the executors:
 * each row's arrival checks, its partition's running watermark, the output watermark and the ordering check, in seq
 * order from each chunk's (or stretch's) start values. What leaves the JVM is chosen by the mode, so a replay
 * moves no row it does not keep:
 *
 * <ul>
 *   <li>{@code all}: every row with its decision (the decisions' full view);
 *   <li>{@code kept}: the kept events only (what a job's windows aggregate);
 *   <li>{@code members}: a kept event once per window it belongs to and that had not closed before its row
 *       ({@code x} the window's index, {@code s} its output scope): what the spec's count and sum aggregate;
 *   <li>{@code decide}: the exceptions (events with a reason or not accepted as they came) and the source's
 *       punctuations without a valid time, from seq {@code since} on, and small partial aggregates of every row:
 *       each window index's first closing row, the watermark timeline's first row per step, the hourly metrics'
 *       counts, each output scope's last values, and each partition's maxima of the watermark's two terms (the
 *       floor and the events': what the state after the rows keeps); with {@code closed_here} (a job whose windows take every
 *       kept event as it is), the kept events' windows already closed before them, each with the event's decision
 *       (a job's filter then picks its {@code window_closed} dead letters among them).
 * </ul>
 *
 * <p>Input: {@code seq long, partition int, kind byte (0 event, 1 clock, 2 punctuation), arrival long, et long
 * (null: none), duplicate boolean, chunk int} and, with stretches, {@code row boolean}; any other column passes
 * through. Output: the input columns (null on partial rows), then {@link #ADDED}. {@code tests/model.py} is the
 * reference; the engine's property tests compare the two.
 */
public final class Decide {
  private Decide() {}

  public static final long NEG = -(1L << 62);
  static final long HOUR = 3_600_000_000L;

  /** What a row of the output is: a decided row, or one of the partial aggregates. */
  static final byte DECIDED = 0, UNTIMED = 1, CLOSE = 2, STEP = 3, METRICS = 4, SCOPE = 5, CLOSED = 6, TERMS = 7;
  /** Actions (null for rows that are not events) and reasons (bits, in the spec's check order). */
  static final byte ACCEPTED = 0, ADJUSTED = 1, DROPPED = 2, QUARANTINED = 3;
  static final int DUPLICATE = 1, INVALID = 2, EARLY = 4, LATE = 8, OUT_OF_ORDER = 16;
  static final int ADJUST = 0, DROP = 1, ACCEPT = 2;
  /** The metrics' counts, in the order of {@code metrics.PARTIAL}: summed, but for the delay's maximum (last). */
  static final int EVENTS = 0, CLOCKS = 1, ACTIONS = 2, DUPLICATES = 6, REASON_ACTIONS = 7, DELAY_ROWS = 16,
      DELAY_S = 17, DELAY_US = 18, DELAY_MAX = 19, COUNTS = 20;

  public static final StructType ADDED = StructType.fromDDL(
      "tag byte, action byte, reasons byte, timestamp long, wp long, owm long, s int, x long, y long, z long, "
      + "counts array<long>");

  /** Called through py4j: arrays as little-endian int64 bytes, the policy's numbers in {@code settings}. */
  public static Dataset<Row> run(Dataset<Row> rows, String mode, Map<String, Object> settings, byte[] parts,
                                 byte[] table, int unitFirst, byte[] first, byte[] last, byte[] counts) {
    org.apache.spark.sql.classic.Dataset<Row> ds = (org.apache.spark.sql.classic.Dataset<Row>) rows;
    StructType in = ds.schema();
    StructType out = new StructType();
    for (StructField f : in.fields()) {
      out = out.add(f.name(), f.dataType(), true);
    }
    for (StructField f : ADDED.fields()) {
      out = out.add(f.name(), f.dataType(), true);
    }
    Rules rules = new Rules(settings);
    boolean stretched = first != null;
    Pass pass = new Pass(in, out, Mode.valueOf(mode.toUpperCase()), rules, longs(parts),
        longs(table), unitFirst, stretched ? longs(first) : null,
        stretched ? longs(last) : null, stretched ? longs(counts) : null);
    JavaRDD<InternalRow> ran = lazily(ds).toJavaRDD().mapPartitions(pass);
    return ds.sparkSession().internalCreateDataFrame(ran.rdd(), out, false);
  }

  /**
   * The rows' RDD, planned without adaptive execution: an adaptive plan runs its shuffle stages (a live batch's
   * rows repartitioned by chunk, with their fields) as soon as its RDD is asked for, that is when the pass is built,
   * whether or not anything reads the pass's output; planned plainly, they run when it is read.
   */
  static RDD<InternalRow> lazily(org.apache.spark.sql.classic.Dataset<Row> ds) {
    org.apache.spark.sql.classic.SparkSession plain = ds.sparkSession().cloneSession();
    plain.sessionState().conf().setConfString("spark.sql.adaptive.enabled", "false");
    return org.apache.spark.sql.classic.Dataset.ofRows(plain, ds.logicalPlan()).queryExecution().toRdd();
  }

  /** Arrays come through py4j as little-endian int64 bytes (numpy's {@code tobytes}). */
  static long[] longs(byte[] bytes) {
    long[] out = new long[bytes.length / 8];
    ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
    return out;
  }

  /** The indexes of {@code seq} in ascending order (a task reads a file's rows in order: usually the identity). */
  static int[] seqOrder(long[] seq) {
    int n = seq.length;
    int[] order = new int[n];
    boolean sorted = true;
    for (int i = 0; i < n; i++) {
      order[i] = i;
      if (i > 0 && seq[i] < seq[i - 1]) {
        sorted = false;
      }
    }
    if (sorted) {
      return order;
    }
    Integer[] boxed = new Integer[n];
    for (int i = 0; i < n; i++) {
      boxed[i] = i;
    }
    Arrays.sort(boxed, (a, b) -> Long.compare(seq[a], seq[b]));
    for (int i = 0; i < n; i++) {
      order[i] = boxed[i];
    }
    return order;
  }

  /** The minimum over the partitions' current values (the merged output watermark), a tournament tree: O(log P). */
  static final class MinTree {
    private final int size;
    private final long[] tree;

    MinTree(int n) {
      int s = 1;
      while (s < n) {
        s <<= 1;
      }
      size = s;
      tree = new long[2 * s];
    }

    void reset(long[] values) {
      Arrays.fill(tree, Long.MAX_VALUE);
      System.arraycopy(values, 0, tree, size, values.length);
      for (int i = size - 1; i >= 1; i--) {
        tree[i] = Math.min(tree[2 * i], tree[2 * i + 1]);
      }
    }

    void set(int i, long v) {
      int at = size + i;
      tree[at] = v;
      for (at >>= 1; at >= 1; at >>= 1) {
        long m = Math.min(tree[2 * at], tree[2 * at + 1]);
        if (tree[at] == m) {
          break;
        }
        tree[at] = m;
      }
    }

    long min() {
      return tree[1];
    }
  }

  enum Mode { ALL, KEPT, MEMBERS, DECIDE }

  /** The policy's numbers (microseconds; null where a tolerance is disabled), read once from py4j's map. */
  static final class Rules implements java.io.Serializable {
    final Long early, late;
    final long outOfOrder;
    final boolean earlyAdjust, byArrival, sourceOnly, merged, windowed, closedHere;
    final int lateAction, orderAction;
    final long offset, size, hop, lateness, resolution, since;
    final long[] stepBefore;  // per source partition (as `parts`): the timeline's step reached before, or MIN
    final long[] scopeOwm;    // per output scope (merged: one; else as `parts`): its output watermark before the rows

    Rules(Map<String, Object> m) {
      early = optional(m, "early");
      late = optional(m, "late");
      outOfOrder = number(m, "out_of_order");
      earlyAdjust = (Boolean) m.get("early_adjust");
      lateAction = (int) number(m, "late_action");
      orderAction = (int) number(m, "order_action");
      byArrival = (Boolean) m.get("by_arrival");
      sourceOnly = (Boolean) m.get("source_only");
      merged = (Boolean) m.get("merged");
      windowed = m.get("size") != null;
      offset = windowed ? number(m, "offset") : 0;
      size = windowed ? number(m, "size") : 1;
      hop = windowed ? number(m, "hop") : 1;
      lateness = windowed ? number(m, "lateness") : 0;
      resolution = number(m, "resolution");
      since = m.get("since") == null ? Long.MIN_VALUE : number(m, "since");
      stepBefore = longs((byte[]) m.get("step_before"));
      scopeOwm = longs((byte[]) m.get("scope_owm"));
      closedHere = windowed && Boolean.TRUE.equals(m.get("closed_here"));
    }

    private static Long optional(Map<String, Object> m, String k) {
      return m.get(k) == null ? null : number(m, k);
    }

    private static long number(Map<String, Object> m, String k) {
      Object v = m.get(k);
      if (!(v instanceof Number)) {
        throw new IllegalArgumentException("Decide: setting " + k + " is " + v + ", not a number");
      }
      return ((Number) v).longValue();
    }

    /** The first window index holding event time {@code t} (window k spans [offset + k*hop, + size)). */
    long firstWindow(long t) {
      return Math.floorDiv(t - offset - size, hop) + 1;
    }

    /** The last window index holding event time {@code t}. */
    long lastWindow(long t) {
      return Math.floorDiv(t - offset, hop);
    }

    /** The last window index closed once the output watermark is {@code owm} (MIN when none is). */
    long reached(long owm) {
      return owm <= NEG ? Long.MIN_VALUE : Math.floorDiv(owm - offset - size - lateness, hop);
    }
  }

  /** One task's rows, buffered, then taken in seq order unit (chunk or stretch) by unit. */
  static final class Pass implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private final DataType[] outTypes;
    private final int inWidth, seqAt, partitionAt, kindAt, arrivalAt, etAt, duplicateAt, chunkAt, rowAt;
    private final Mode mode;
    private final Rules rules;
    private final long[] parts, table, first, last, counts;
    private final int units, unitFirst;

    Pass(StructType in, StructType out, Mode mode, Rules rules, long[] parts, long[] table, int unitFirst,
         long[] first, long[] last, long[] counts) {
      StructField[] fields = out.fields();
      outTypes = new DataType[fields.length];
      for (int i = 0; i < fields.length; i++) {
        outTypes[i] = fields[i].dataType();
      }
      inWidth = in.fields().length;
      seqAt = in.fieldIndex("seq");
      partitionAt = in.fieldIndex("partition");
      kindAt = in.fieldIndex("kind");
      arrivalAt = in.fieldIndex("arrival");
      etAt = in.fieldIndex("et");
      duplicateAt = in.fieldIndex("duplicate");
      chunkAt = in.fieldIndex("chunk");
      rowAt = first != null ? in.fieldIndex("row") : -1;
      this.mode = mode;
      this.rules = rules;
      this.parts = parts;
      this.table = table;
      this.units = parts.length == 0 ? 0 : table.length / parts.length;
      this.unitFirst = unitFirst;
      this.first = first;
      this.last = last;
      this.counts = counts;
    }

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> input) {
      ArrayList<InternalRow> rows = new ArrayList<>();
      while (input.hasNext()) {
        rows.add(input.next().copy());
      }
      return new Walk(rows);
    }

    /** The task's rows decided one at a time as the output is read: only what the mode keeps is held. */
    final class Walk implements Iterator<InternalRow> {
      private final ArrayList<InternalRow> rows;
      private final long[] seq, current = new long[parts.length];
      private final int[] order, unit;
      private final MinTree tree;
      private final Partials partials;
      private final Out out = new Out(outTypes, inWidth);
      private final Decision d = new Decision();
      private int j = 0, at = -1, next = 0;
      private boolean flushed;

      Walk(ArrayList<InternalRow> rows) {
        this.rows = rows;
        int n = rows.size();
        seq = new long[n];
        for (int i = 0; i < n; i++) {
          seq[i] = rows.get(i).getLong(seqAt);
        }
        order = seqOrder(seq);
        unit = new int[n];
        for (int i = 0; i < n; i++) {
          unit[i] = first != null ? stretchOf(seq[i]) : rows.get(i).getInt(chunkAt) - unitFirst;
        }
        if (first != null) {
          checkWhole(unit, seq);
        }
        tree = rules.merged ? new MinTree(parts.length) : null;
        partials = mode == Mode.DECIDE ? new Partials(rules, parts) : null;
      }

      @Override
      public boolean hasNext() {
        while (out.main == null && next >= out.rows.size()) {
          out.rows.clear();
          next = 0;
          if (j < order.length) {
            step(order[j++]);
          } else if (partials != null && !flushed) {
            flushed = true;
            partials.emit(out);
          } else {
            return false;
          }
        }
        return true;
      }

      @Override
      public InternalRow next() {
        if (!hasNext()) {
          throw new java.util.NoSuchElementException();
        }
        if (out.main != null) {
          InternalRow main = out.main;
          out.main = null;
          return main;
        }
        return out.rows.get(next++);
      }

      /** Decides the row at {@code i}, the next in seq order, and adds what the mode keeps of it to the output. */
      private void step(int i) {
        if (unit[i] != at) {  // a new chunk or stretch: every partition from its start value there
          at = unit[i];
          for (int p = 0; p < parts.length; p++) {
            current[p] = table[p * units + at];
          }
          if (tree != null) {
            tree.reset(current);
          }
        }
        InternalRow r = rows.get(i);
        rows.set(i, null);  // let the buffered row go once it is decided
        if (rowAt >= 0 && !r.getBoolean(rowAt)) {
          return;
        }
        int p = Arrays.binarySearch(parts, r.getInt(partitionAt));
        if (p < 0) {
          throw new IllegalStateException("row at seq " + seq[i] + " has partition " + r.getInt(partitionAt)
              + ", which is not among the source's partitions");
        }
        long owmBefore = Math.max(rules.scopeOwm[rules.merged ? 0 : p], tree != null ? tree.min() : current[p]);
        decide(r, p, current, tree, d);
        if (mode == Mode.ALL || (mode == Mode.KEPT && d.kept)) {
          out.decided(r, d);
        } else if (mode == Mode.MEMBERS && d.kept) {
          long lo = Math.max(rules.firstWindow(d.timestamp), rules.reached(owmBefore) + 1);
          int scope = rules.merged ? -1 : (int) parts[p];
          for (long k = rules.lastWindow(d.timestamp); k >= lo; k--) {
            out.member(r, d, k, scope);
          }
        } else if (mode == Mode.DECIDE) {
          partials.add(d, p);
          if (d.seq >= rules.since) {
            if (d.kind == 0 && (d.action != ACCEPTED || d.reasons != 0)) {
              out.decided(r, d);
            } else if (d.kind == 2 && r.isNullAt(etAt) && !r.getBoolean(duplicateAt)) {
              out.tagged(r, UNTIMED);
            }
          }
          if (rules.closedHere && d.kept && d.seq >= rules.since) {  // its windows closed before its row (spec 5)
            long hi = Math.min(rules.lastWindow(d.timestamp), rules.reached(owmBefore));
            for (long k = rules.firstWindow(d.timestamp); k <= hi; k++) {
              out.closed(r, d, k);
            }
          }
        }
      }
    }

    /** Steps 1-4 and the watermarks after the row (spec 3 and 4), updating {@code current} and {@code tree}. */
    private void decide(InternalRow r, int p, long[] current, MinTree tree, Decision d) {
      d.seq = r.getLong(seqAt);
      d.kind = r.getByte(kindAt);
      if (r.isNullAt(arrivalAt)) {
        throw new IllegalStateException("journal row at seq " + d.seq + " has no arrival time");
      }
      long arrival = r.getLong(arrivalAt);
      d.arrival = arrival;
      boolean event = d.kind == 0, dup = r.getBoolean(duplicateAt), hasEt = !r.isNullAt(etAt);
      long et = hasEt ? r.getLong(etAt) : 0;
      boolean quarantined, early = false, late = false, passed;
      long t = 0;
      if (rules.byArrival) {
        quarantined = event && dup;
        passed = event && !quarantined;
        t = arrival;
      } else {
        quarantined = event && (!hasEt || dup);
        long t1 = et;
        boolean earlyDrop = false, lateDrop = false;
        if (rules.early != null) {
          early = event && !quarantined && et > arrival + rules.early;
          if (rules.earlyAdjust) {
            t1 = early ? arrival + rules.early : et;
          } else {
            earlyDrop = early;
          }
        }
        long t2 = t1;
        if (rules.late != null) {
          late = event && !quarantined && !earlyDrop && t1 < arrival - rules.late;
          if (rules.lateAction == ADJUST) {
            t2 = late ? arrival - rules.late : t1;
          } else if (rules.lateAction == DROP) {
            lateDrop = late;
          }
        }
        passed = event && !quarantined && !earlyDrop && !lateDrop;
        t = t2;
      }
      // the watermark's two terms: the partition's floor (and a punctuation the source sent), the event's t - O
      Long floorTolerance = rules.byArrival ? Long.valueOf(rules.outOfOrder) : rules.late;
      long c = floorTolerance == null ? NEG : arrival - floorTolerance;
      if (d.kind == 2 && hasEt && !dup) {
        c = Math.max(c, et);
      }
      d.floor = c;
      d.event = passed && !rules.sourceOnly ? t - rules.outOfOrder : Long.MIN_VALUE;
      c = Math.max(c, d.event);
      long before = current[p];
      if (c > current[p]) {
        current[p] = c;
        if (tree != null) {
          tree.set(p, c);
        }
      }
      d.wp = current[p];
      d.owm = tree != null ? tree.min() : current[p];
      boolean ooo = !rules.byArrival && passed && t < before;
      boolean kept = passed && !(ooo && rules.orderAction == DROP);
      d.kept = kept;
      d.timestamp = kept ? (ooo && rules.orderAction == ADJUST ? before : t) : 0;
      d.action = -1;
      d.reasons = 0;
      if (event) {
        boolean adjusted = (early && rules.earlyAdjust) || (late && rules.lateAction == ADJUST)
            || (ooo && rules.orderAction == ADJUST);
        d.action = quarantined ? QUARANTINED : !kept ? DROPPED : adjusted ? ADJUSTED : ACCEPTED;
        d.reasons = (dup ? DUPLICATE : quarantined ? INVALID : 0) | (early ? EARLY : 0) | (late ? LATE : 0)
            | (ooo ? OUT_OF_ORDER : 0);
      }
    }

    private int stretchOf(long s) {
      int i = Arrays.binarySearch(first, s);
      int at = i >= 0 ? i : -i - 2;
      if (at < 0 || s > last[at]) {
        throw split(s);
      }
      return at;
    }

    private void checkWhole(int[] unit, long[] seq) {
      int[] held = new int[counts.length];
      long[] lowest = new long[counts.length];
      Arrays.fill(lowest, Long.MAX_VALUE);
      for (int i = 0; i < unit.length; i++) {
        held[unit[i]]++;
        lowest[unit[i]] = Math.min(lowest[unit[i]], seq[i]);
      }
      for (int u = 0; u < counts.length; u++) {
        if (held[u] > 0 && held[u] != counts[u]) {
          throw split(lowest[u]);
        }
      }
    }

    private static RuntimeException split(long around) {
      return new IllegalStateException("a task of the decide pass holds part of the journal's rows around seq "
          + around + ", which the first pass found whole in one task: the two passes got the rows split "
          + "differently (did the cluster's cores change between them?); run the replay again");
    }
  }

  /** A partition (or scope) and a step of time in it: a key of the partials' maps. */
  record StepKey(long partition, long step) {}

  /** One row's decision: what the output's added columns hold (one instance per task, reused row by row). */
  static final class Decision {
    long seq, arrival, wp, owm, timestamp;
    long floor, event;  // the watermark's two terms of the row: its partition's floor, and t - O (MIN_VALUE: none)
    byte kind, action;  // action: -1 for rows that are not events
    int reasons;
    boolean kept;       // an event kept, with its timestamp
  }

  /**
   * A task's partial aggregates of every row it decides (the decide mode's small rows). Rows come in seq order, so
   * each partition's watermark step, hour and each scope's reached window index only rise: a map is touched only
   * when one changes, not for every row.
   */
  static final class Partials {
    private final Rules rules;
    private final long[] parts;
    private final HashMap<StepKey, Long> closes = new HashMap<>();     // (scope index, reached) -> first seq
    private final HashMap<StepKey, long[]> steps = new HashMap<>();    // (partition, step) -> its first row
    private final HashMap<StepKey, long[]> metrics = new HashMap<>();  // (partition, hour) -> counts
    private final long[][] scopes;                                      // per scope: last values
    private final long[] lastStep, lastHour, lastReached;
    private final long[][] hourCounts;
    private final long[] floorMax, eventMax;                            // per partition: the terms' maxima

    Partials(Rules rules, long[] parts) {
      this.rules = rules;
      this.parts = parts;
      int n = parts.length, s = rules.merged ? 1 : n;
      scopes = new long[s][];
      lastReached = new long[s];
      Arrays.fill(lastReached, Long.MIN_VALUE);
      lastStep = new long[n];
      Arrays.fill(lastStep, Long.MIN_VALUE);
      lastHour = new long[n];
      Arrays.fill(lastHour, Long.MIN_VALUE);
      hourCounts = new long[n][];
      floorMax = new long[n];
      eventMax = new long[n];
      Arrays.fill(floorMax, Long.MIN_VALUE);
      Arrays.fill(eventMax, Long.MIN_VALUE);
    }

    void add(Decision d, int p) {
      int at = rules.merged ? 0 : p;
      long[] s = scopes[at];
      if (s == null) {  // the scope's last values: seq, output watermark, event arrival, kept events' first/last time
        s = scopes[at] = new long[] {Long.MIN_VALUE, NEG, Long.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE};
      }
      s[0] = Math.max(s[0], d.seq);
      s[1] = Math.max(s[1], d.owm);
      floorMax[p] = Math.max(floorMax[p], d.floor);
      eventMax[p] = Math.max(eventMax[p], d.event);
      if (d.kind == 0) {
        s[2] = Math.max(s[2], d.arrival);
      }
      if (d.kept) {
        s[3] = Math.min(s[3], d.timestamp);
        s[4] = Math.max(s[4], d.timestamp);
      }
      if (rules.windowed && d.owm > NEG) {
        long reached = rules.reached(d.owm);
        if (reached != lastReached[at]) {
          lastReached[at] = reached;
          closes.merge(new StepKey(at, reached), d.seq, Math::min);
        }
      }
      if (d.wp > NEG) {
        long step = Math.floorDiv(d.wp, rules.resolution);
        if (step != lastStep[p] && step > rules.stepBefore[p]) {
          lastStep[p] = step;
          steps.merge(new StepKey(parts[p], step), new long[] {parts[p], step, d.seq, d.arrival, d.wp, d.owm},
              (a, b) -> a[2] <= b[2] ? a : b);
        }
      }
      if (d.seq < rules.since) {
        return;
      }
      long hour = Math.floorDiv(d.arrival, HOUR) * HOUR;
      long[] m = hourCounts[p];
      if (hour != lastHour[p]) {
        lastHour[p] = hour;
        m = hourCounts[p] = metrics.computeIfAbsent(new StepKey(parts[p], hour), k -> {
          long[] z = new long[COUNTS];
          z[DELAY_MAX] = Long.MIN_VALUE;
          return z;
        });
      }
      if (d.kind == 0) {
        m[EVENTS]++;
        m[ACTIONS + d.action]++;
        if ((d.reasons & DUPLICATE) != 0) {
          m[DUPLICATES]++;
        }
        int column = d.action == DROPPED ? 0 : d.action == ADJUSTED ? 1 : d.action == ACCEPTED ? 2 : -1;
        if (column >= 0 && (d.reasons & (EARLY | LATE | OUT_OF_ORDER)) != 0) {
          if ((d.reasons & EARLY) != 0) {
            m[REASON_ACTIONS + column]++;
          }
          if ((d.reasons & LATE) != 0) {
            m[REASON_ACTIONS + 3 + column]++;
          }
          if ((d.reasons & OUT_OF_ORDER) != 0) {
            m[REASON_ACTIONS + 6 + column]++;
          }
        }
      } else if (d.kind == 1) {
        m[CLOCKS]++;
      }
      if (d.owm > NEG) {
        long delay = d.arrival - d.owm;
        m[DELAY_ROWS]++;
        m[DELAY_S] += Math.floorDiv(delay, 1_000_000L);
        m[DELAY_US] += Math.floorMod(delay, 1_000_000L);
        m[DELAY_MAX] = Math.max(m[DELAY_MAX], delay);
      }
    }

    void emit(Out out) {
      for (Map.Entry<StepKey, Long> c : closes.entrySet()) {
        int at = (int) c.getKey().partition();
        out.partial(CLOSE, rules.merged ? -1 : (int) parts[at], c.getKey().step(), c.getValue(), null, null);
      }
      for (long[] v : steps.values()) {
        out.partial(STEP, (int) v[0], v[1], v[2], v[3], new long[] {v[4], v[5]});
      }
      for (Map.Entry<StepKey, long[]> m : metrics.entrySet()) {
        out.partial(METRICS, (int) m.getKey().partition(), m.getKey().step(), null, null, m.getValue());
      }
      for (int at = 0; at < scopes.length; at++) {
        if (scopes[at] != null) {
          out.partial(SCOPE, rules.merged ? -1 : (int) parts[at], null, null, null, scopes[at]);
        }
      }
      for (int p = 0; p < parts.length; p++) {  // a partition with rows (a floor term is never MIN_VALUE)
        if (floorMax[p] != Long.MIN_VALUE) {  // the event term's maximum null where no event passed
          out.partial(TERMS, (int) parts[p], floorMax[p], eventMax[p] == Long.MIN_VALUE ? null : eventMax[p], null,
              null);
        }
      }
    }
  }

  /**
   * The task's output rows: an input row with its decision (the step's main row, projected into the projection's
   * own buffer: read before the next step), or copies of the few other rows a step or the task's end adds.
   */
  static final class Out {
    final ArrayList<InternalRow> rows = new ArrayList<>();
    InternalRow main;
    private final UnsafeProjection project, copying;  // the main row's, the others' (copied: its buffer is reused)
    private final GenericInternalRow none;
    private final JoinedRow joined = new JoinedRow();
    private final SpecificInternalRow added = new SpecificInternalRow(ADDED);

    Out(DataType[] types, int inWidth) {
      this.project = UnsafeProjection.create(types);
      this.copying = UnsafeProjection.create(types);
      this.none = new GenericInternalRow(inWidth);
    }

    void decided(InternalRow r, Decision d) {
      fill(d);
      main = project.apply(joined.apply(r, added));
    }

    private void fill(Decision d) {
      for (int i = 0; i < ADDED.length(); i++) {
        added.setNullAt(i);
      }
      added.setByte(0, DECIDED);
      if (d.action >= 0) {
        added.setByte(1, d.action);
        added.setByte(2, (byte) d.reasons);
      }
      if (d.kept) {
        added.setLong(3, d.timestamp);
      }
      added.setLong(4, d.wp);
      added.setLong(5, d.owm);
    }

    /** A member of window {@code k}: the step's main row for its first window, a copy for the others. */
    void member(InternalRow r, Decision d, long k, int scope) {
      if (main != null) {
        add(r, new Object[] {DECIDED, d.action, (byte) d.reasons, d.timestamp, d.wp, d.owm, scope, k, null, null,
            null});
        return;
      }
      fill(d);
      added.setInt(6, scope);
      added.setLong(7, k);
      main = project.apply(joined.apply(r, added));
    }

    /** A kept event's window {@code k}, closed before its row: the event with its decision, and the window. */
    void closed(InternalRow r, Decision d, long k) {
      add(r, new Object[] {CLOSED, d.action, (byte) d.reasons, d.timestamp, d.wp, d.owm, null, k, null, null, null});
    }

    void tagged(InternalRow r, byte tag) {
      add(r, new Object[] {tag, null, null, null, null, null, null, null, null, null, null});
    }

    void partial(byte tag, int s, Long x, Long y, Long z, long[] counts) {
      add(none, new Object[] {tag, null, null, null, null, null, s, x, y, z,
          counts == null ? null : new GenericArrayData(counts)});
    }

    private void add(InternalRow r, Object[] added) {
      rows.add(copying.apply(new JoinedRow(r, new GenericInternalRow(added))).copy());
    }
  }
}

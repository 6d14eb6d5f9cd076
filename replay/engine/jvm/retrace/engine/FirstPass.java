package retrace.engine;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.StructType;

/**
 * The first pass over a whole journal's rows where they lie, in the JVM: each task takes its rows in seq order,
 * cuts them into stretches (consecutive seq within one chunk and one file) and sends back a few rows per stretch:
 * its events' offset steps, each partition's first and last offset, the maxima of the watermark's two terms and a
 * census. The rows never leave the JVM; the numpy pass this replaces moved ten columns of each to Python.
 *
 * <p>Input columns: chunk int, file long, partition int, seq long, offset long, hour long, event boolean,
 * row boolean, floor long, events long. Output: {@link #SCHEMA}, one kind of row per filled set of columns
 * (read by {@code replay/engine/kernels.py}'s {@code chunk_pass}).
 */
public final class FirstPass {
  private FirstPass() {}

  public static final StructType SCHEMA = StructType.fromDDL(
      "stretch long, chunk int, partition int, hour long, backward long, not_rising long, first long, last long, "
      + "floor long, events long, rows long");

  /** Called through py4j. */
  public static Dataset<Row> run(Dataset<Row> rows) {
    org.apache.spark.sql.classic.Dataset<Row> ds = (org.apache.spark.sql.classic.Dataset<Row>) rows;
    JavaRDD<InternalRow> found = ds.queryExecution().toRdd().toJavaRDD().mapPartitions(new Cut(ds.schema()));
    return ds.sparkSession().internalCreateDataFrame(found.rdd(), SCHEMA, false);
  }

  /** A partition's events reaching one hour at or below the partition's previous offset. */
  private record Step(int partition, long hour) {}

  /** One task's rows: read into arrays, taken in seq order, stretch by stretch. */
  static final class Cut implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private final int chunkAt, fileAt, partitionAt, seqAt, offsetAt, hourAt, eventAt, rowAt, floorAt, eventsAt;

    Cut(StructType in) {
      chunkAt = in.fieldIndex("chunk");
      fileAt = in.fieldIndex("file");
      partitionAt = in.fieldIndex("partition");
      seqAt = in.fieldIndex("seq");
      offsetAt = in.fieldIndex("offset");
      hourAt = in.fieldIndex("hour");
      eventAt = in.fieldIndex("event");
      rowAt = in.fieldIndex("row");
      floorAt = in.fieldIndex("floor");
      eventsAt = in.fieldIndex("events");
    }

    private int n;
    private int[] chunk, partition;
    private long[] file, seq, offset, hour, floor, events;
    private boolean[] event, row;

    @Override
    public Iterator<InternalRow> call(Iterator<InternalRow> input) {
      read(input);
      ArrayList<InternalRow> out = new ArrayList<>();
      if (n == 0) {
        return out.iterator();
      }
      sortBySeq();
      int[] parts = Arrays.stream(partition, 0, n).distinct().sorted().toArray();
      int[] at = new int[n];
      for (int i = 0; i < n; i++) {
        at[i] = Arrays.binarySearch(parts, partition[i]);
      }
      Stretch stretch = new Stretch(parts);
      int lo = 0;
      for (int i = 1; i <= n; i++) {
        if (i == n || seq[i] != seq[i - 1] + 1 || chunk[i] != chunk[i - 1] || file[i] != file[i - 1]) {
          stretch.emit(lo, i, at, out);
          lo = i;
        }
      }
      return out.iterator();
    }

    private void read(Iterator<InternalRow> input) {
      int size = 1024;
      n = 0;
      chunk = new int[size];
      partition = new int[size];
      file = new long[size];
      seq = new long[size];
      offset = new long[size];
      hour = new long[size];
      floor = new long[size];
      events = new long[size];
      event = new boolean[size];
      row = new boolean[size];
      while (input.hasNext()) {
        InternalRow r = input.next();
        if (n == chunk.length) {
          grow(2 * n);
        }
        chunk[n] = r.getInt(chunkAt);
        file[n] = r.getLong(fileAt);
        partition[n] = r.getInt(partitionAt);
        seq[n] = r.getLong(seqAt);
        offset[n] = r.getLong(offsetAt);
        hour[n] = r.getLong(hourAt);
        event[n] = r.getBoolean(eventAt);
        row[n] = r.getBoolean(rowAt);
        floor[n] = r.getLong(floorAt);
        events[n] = r.getLong(eventsAt);
        n++;
      }
    }

    private void grow(int size) {
      chunk = Arrays.copyOf(chunk, size);
      partition = Arrays.copyOf(partition, size);
      file = Arrays.copyOf(file, size);
      seq = Arrays.copyOf(seq, size);
      offset = Arrays.copyOf(offset, size);
      hour = Arrays.copyOf(hour, size);
      floor = Arrays.copyOf(floor, size);
      events = Arrays.copyOf(events, size);
      event = Arrays.copyOf(event, size);
      row = Arrays.copyOf(row, size);
    }

    /** Every column permuted into seq order (a task reads a file's rows in order, so usually nothing moves). */
    private void sortBySeq() {
      int[] order = Decide.seqOrder(Arrays.copyOf(seq, n));
      boolean moved = false;
      for (int i = 0; i < n && !moved; i++) {
        moved = order[i] != i;
      }
      if (!moved) {
        return;
      }
      int[] c = new int[n], p = new int[n];
      long[] f = new long[n], s = new long[n], o = new long[n], h = new long[n], fl = new long[n], ev = new long[n];
      boolean[] e = new boolean[n], r = new boolean[n];
      for (int j = 0; j < n; j++) {
        int i = order[j];
        c[j] = chunk[i];
        p[j] = partition[i];
        f[j] = file[i];
        s[j] = seq[i];
        o[j] = offset[i];
        h[j] = hour[i];
        fl[j] = floor[i];
        ev[j] = events[i];
        e[j] = event[i];
        r[j] = row[i];
      }
      chunk = c;
      partition = p;
      file = f;
      seq = s;
      offset = o;
      hour = h;
      floor = fl;
      events = ev;
      event = e;
      row = r;
    }

    /** Per-partition scratch for one stretch, reset only where the stretch touched it. */
    final class Stretch {
      private final int[] parts;
      private final boolean[] seen, anyEvent, anyRow;
      private final long[] firstOffset, firstHour, lastOffset, maxFloor, maxEvents;
      private final int[] touched;

      Stretch(int[] parts) {
        this.parts = parts;
        int p = parts.length;
        seen = new boolean[p];
        anyEvent = new boolean[p];
        anyRow = new boolean[p];
        firstOffset = new long[p];
        firstHour = new long[p];
        lastOffset = new long[p];
        maxFloor = new long[p];
        maxEvents = new long[p];
        touched = new int[p];
      }

      /** The rows of stretch [lo, hi), in seq order: its steps, ends, maxima and census appended to {@code out}. */
      void emit(int lo, int hi, int[] at, ArrayList<InternalRow> out) {
        Map<Step, long[]> steps = new LinkedHashMap<>();
        int count = 0;
        for (int i = lo; i < hi; i++) {
          int p = at[i];
          if (!seen[p]) {
            seen[p] = true;
            touched[count++] = p;
          }
          if (event[i]) {
            if (anyEvent[p]) {
              if (offset[i] <= lastOffset[p]) {
                long[] s = steps.computeIfAbsent(new Step(parts[p], hour[i]), k -> new long[2]);
                s[0] += offset[i] < lastOffset[p] ? 1 : 0;
                s[1] += 1;
              }
            } else {
              anyEvent[p] = true;
              firstOffset[p] = offset[i];
              firstHour[p] = hour[i];
            }
            lastOffset[p] = offset[i];
          }
          if (row[i]) {
            if (anyRow[p]) {
              maxFloor[p] = Math.max(maxFloor[p], floor[i]);
              maxEvents[p] = Math.max(maxEvents[p], events[i]);
            } else {
              anyRow[p] = true;
              maxFloor[p] = floor[i];
              maxEvents[p] = events[i];
            }
          }
        }
        long first = seq[lo];
        int ch = chunk[lo];
        for (Map.Entry<Step, long[]> s : steps.entrySet()) {
          out.add(found(first, ch, s.getKey().partition(), s.getKey().hour(), s.getValue()[0], s.getValue()[1],
              null, null, null, null, null));
        }
        for (int k = 0; k < count; k++) {
          int p = touched[k];
          if (anyEvent[p]) {
            out.add(found(first, ch, parts[p], firstHour[p], 0L, 0L, firstOffset[p], lastOffset[p], null, null, null));
          }
          if (anyRow[p]) {
            out.add(found(first, ch, parts[p], null, null, null, null, null, maxFloor[p], maxEvents[p], null));
          }
          seen[p] = false;
          anyEvent[p] = false;
          anyRow[p] = false;
        }
        out.add(found(first, ch, null, null, null, null, null, seq[hi - 1], null, null, (long) (hi - lo)));
      }
    }

    /** One row of {@link #SCHEMA}; null where this kind of row has no value. */
    private static InternalRow found(long stretch, int chunk, Integer partition, Long hour, Long backward,
                                     Long notRising, Long first, Long last, Long floor, Long events, Long rows) {
      return new GenericInternalRow(new Object[] {
          stretch, chunk, partition, hour, backward, notRising, first, last, floor, events, rows});
    }
  }
}

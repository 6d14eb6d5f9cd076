package retrace.engine;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Iterator;
import java.util.NoSuchElementException;

import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The watermark pass's sequential part on the executors, in the JVM: each partition's running maximum of its
 * contribution {@code c} in seq order, from its value at the start of the row's chunk (or stretch), the value
 * before the row, and the minimum over all partitions after it (the merged output watermark). Rows stay in the
 * JVM: the Python round trip this replaces cost about a second per pass per million rows.
 *
 * <p>Chunk mode ({@code first == null}): each task holds whole chunks ({@code chunk} column, repartitioned by the
 * caller). Stretch mode: each task holds whole stretches of the first pass (their first and last seq and row
 * count); rows whose {@code row} flag is false count towards their stretch and are left out.
 */
public final class RunningWatermarks {
  private RunningWatermarks() {}

  /** Called through py4j: arrays come as little-endian int64 bytes (numpy's {@code tobytes}). */
  public static Dataset<Row> run(Dataset<Row> rows, byte[] parts, byte[] table, boolean merged, int chunkFirst,
                                 byte[] first, byte[] last, byte[] counts) {
    org.apache.spark.sql.classic.Dataset<Row> ds = (org.apache.spark.sql.classic.Dataset<Row>) rows;
    StructType in = ds.schema();
    StructType out = in.add("wp", DataTypes.LongType, false).add("w_before", DataTypes.LongType, false);
    if (merged) {
      out = out.add("merged", DataTypes.LongType, false);
    }
    boolean stretched = first != null;
    Pass pass = new Pass(in, out, longs(parts), longs(table), merged, chunkFirst,
        stretched ? longs(first) : null, stretched ? longs(last) : null, stretched ? longs(counts) : null);
    JavaRDD<InternalRow> ran = ds.queryExecution().toRdd().toJavaRDD().mapPartitions(pass);
    return ds.sparkSession().internalCreateDataFrame(ran.rdd(), out, false);
  }

  static long[] longs(byte[] bytes) {
    long[] out = new long[bytes.length / 8];
    ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
    return out;
  }

  /** One task's rows: buffered, taken in seq order, unit (chunk or stretch) by unit. */
  static final class Pass implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
    private final DataType[] outTypes;
    private final int seqAt, partitionAt, cAt, chunkAt, rowAt;
    private final long[] parts, table, first, last, counts;
    private final int units, chunkFirst;
    private final boolean merged;

    Pass(StructType in, StructType out, long[] parts, long[] table, boolean merged, int chunkFirst, long[] first,
         long[] last, long[] counts) {
      StructField[] fields = out.fields();
      this.outTypes = new DataType[fields.length];
      for (int i = 0; i < fields.length; i++) {
        outTypes[i] = fields[i].dataType();
      }
      this.seqAt = in.fieldIndex("seq");
      this.partitionAt = in.fieldIndex("partition");
      this.cAt = in.fieldIndex("c");
      this.chunkAt = in.fieldIndex("chunk");
      this.rowAt = first != null ? in.fieldIndex("row") : -1;
      this.parts = parts;
      this.table = table;
      this.units = parts.length == 0 ? 0 : table.length / parts.length;
      this.merged = merged;
      this.chunkFirst = chunkFirst;
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
      int n = rows.size();
      if (n == 0) {
        return Collections.emptyIterator();
      }
      long[] seq = new long[n];
      for (int i = 0; i < n; i++) {
        seq[i] = rows.get(i).getLong(seqAt);
      }
      int[] order = seqOrder(seq);
      int[] unit = new int[n];
      for (int i = 0; i < n; i++) {
        unit[i] = first != null ? stretchOf(seq[i]) : rows.get(i).getInt(chunkAt) - chunkFirst;
      }
      if (first != null) {
        checkWhole(unit, seq);
      }
      long[] wp = new long[n], before = new long[n], least = merged ? new long[n] : null;
      boolean[] kept = new boolean[n];
      long[] current = new long[parts.length];
      MinTree tree = merged ? new MinTree(parts.length) : null;
      int at = -1;
      for (int j = 0; j < n; j++) {
        int i = order[j];
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
        if (rowAt >= 0 && !r.getBoolean(rowAt)) {
          continue;
        }
        kept[i] = true;
        int p = Arrays.binarySearch(parts, r.getInt(partitionAt));
        if (p < 0) {
          throw new IllegalStateException("row at seq " + seq[i] + " has partition " + r.getInt(partitionAt)
              + ", which is not among the source's partitions");
        }
        long c = r.getLong(cAt);
        before[i] = current[p];
        if (c > current[p]) {
          current[p] = c;
          if (tree != null) {
            tree.set(p, c);
          }
        }
        wp[i] = current[p];
        if (least != null) {
          least[i] = tree.min();
        }
      }
      return new Output(rows, kept, wp, before, least, UnsafeProjection.create(outTypes));
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
      return new IllegalStateException("a task of the watermark pass holds part of the journal's rows around seq "
          + around + ", which the first pass found whole in one task: the two passes got the rows split "
          + "differently (did the cluster's cores change between them?); run the replay again");
    }

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
  }

  /** The minimum over the partitions' current values, kept as a tournament tree: O(log P) a row. */
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

  /** The kept rows with their added columns, projected to unsafe rows one at a time. */
  static final class Output implements Iterator<InternalRow> {
    private final ArrayList<InternalRow> rows;
    private final boolean[] kept;
    private final long[] wp, before, least;
    private final UnsafeProjection project;
    private final GenericInternalRow added;
    private final JoinedRow joined = new JoinedRow();
    private int next = -1;

    Output(ArrayList<InternalRow> rows, boolean[] kept, long[] wp, long[] before, long[] least,
           UnsafeProjection project) {
      this.rows = rows;
      this.kept = kept;
      this.wp = wp;
      this.before = before;
      this.least = least;
      this.project = project;
      this.added = new GenericInternalRow(least != null ? 3 : 2);
      advance();
    }

    private void advance() {
      do {
        next++;
      } while (next < kept.length && !kept[next]);
    }

    @Override
    public boolean hasNext() {
      return next < kept.length;
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      int i = next;
      added.setLong(0, wp[i]);
      added.setLong(1, before[i]);
      if (least != null) {
        added.setLong(2, least[i]);
      }
      InternalRow out = project.apply(joined.apply(rows.get(i), added));
      rows.set(i, null);  // let the buffered row go
      advance();
      return out;
    }
  }
}

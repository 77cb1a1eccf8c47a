package io.kafkalog.spark;

import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Set;

/**
 * read_committed: kafkalog/isolation.py's AbortedTxnFilter (Kafka's consumer,
 * CompletedFetch.abortedProducerIds), fed batch headers in offset order. A producer enters
 * "aborted" when a batch at or past its transaction's first offset is reached (unless the
 * transaction's marker is already below the batch), its transactional data batches are
 * dropped, and its next control batch takes it out.
 */
final class AbortedTxnFilter {
    private final long[][] pending;   // (producer id, first offset, last offset) by first offset
    private int next;
    private final Set<Long> active = new HashSet<>();

    AbortedTxnFilter(long[][] aborted) {
        pending = aborted.clone();
        Arrays.sort(pending, Comparator.<long[]>comparingLong(a -> a[1])
            .thenComparingLong(a -> a[0]));
    }

    /** Whether this data batch belongs to an aborted transaction; control batches are fed too
     *  (and never aborted). */
    boolean aborted(long baseOffset, long lastOffset, long producerId, boolean transactional,
                    boolean control) {
        while (next < pending.length && pending[next][1] <= lastOffset) {
            long[] txn = pending[next++];
            if (txn[2] >= baseOffset) {
                active.add(txn[0]);
            }
        }
        if (active.isEmpty()) {
            return false;
        }
        if (control) {
            active.remove(producerId);
            return false;
        }
        return transactional && active.contains(producerId);
    }
}

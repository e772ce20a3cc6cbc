-- Deletes a batch of rows no longer kept (never an unknown one within its retention): ?1 now,
-- ?2 the batch size. The batch is every expired row up to the ?2-th smallest kept_until (all of
-- them when fewer are expired), so it holds ?2 rows, more only where rows share the cutoff's
-- millisecond; both the cutoff and the delete walk the kept_until index. The store repeats it,
-- one short transaction per batch, until a batch deletes fewer than ?2: one statement over
-- every expired row held the write lock (and grew the WAL) for as long as deleting all of them
-- took. (Not `rowid IN (SELECT … LIMIT)`: that builds a temporary table on every run.)
DELETE FROM toolonce_entries WHERE kept_until <= ?1 AND kept_until <= coalesce(
    (SELECT kept_until FROM toolonce_entries WHERE kept_until <= ?1
     ORDER BY kept_until LIMIT 1 OFFSET ?2 - 1),
    ?1)

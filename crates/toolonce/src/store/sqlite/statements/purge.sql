-- Deletes rows no longer kept (never an unknown one within its retention): ?1 now.
DELETE FROM toolonce_entries WHERE kept_until <= ?1

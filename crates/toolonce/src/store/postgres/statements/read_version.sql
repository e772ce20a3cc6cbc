-- The schema version of table $1, locked until the migration commits. Placeholder:
-- version_table.
SELECT version FROM {{version_table}} WHERE table_name = $1 FOR UPDATE

-- The schema version of table $1, unlocked (`PostgresStore::schema_version`). Placeholder:
-- version_table.
SELECT version FROM {{version_table}} WHERE table_name = $1

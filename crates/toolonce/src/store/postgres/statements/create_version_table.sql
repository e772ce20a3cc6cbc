-- The table that records the schema version of each entries table. Placeholder: version_table.
CREATE TABLE IF NOT EXISTS {{version_table}} (
    table_name text PRIMARY KEY,
    version integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now()
)

-- Records that table $1 has schema version $2. Placeholder: version_table.
INSERT INTO {{version_table}} (table_name, version) VALUES ($1, $2)
ON CONFLICT (table_name) DO UPDATE SET version = EXCLUDED.version, migrated_at = now()

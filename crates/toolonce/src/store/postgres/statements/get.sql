-- The live entry of a key: $1 key. Placeholders: table, entry_columns (entry_columns.sql or
-- entry_columns_by_name.sql, as the driver reads rows).
SELECT {{entry_columns}} FROM {{table}} WHERE key = $1 AND expires_at > now()

-- The schema version of a toolonce file.
PRAGMA user_version

-- Records the schema version. Placeholder: version, a number.
PRAGMA user_version = {{version}}

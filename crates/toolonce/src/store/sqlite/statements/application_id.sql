-- Whose file this is: 0 for a new file, the toolonce id ("tool") for a toolonce database.
PRAGMA application_id

-- Marks a new file as a toolonce database. Placeholder: id, the application id as a number
-- (a PRAGMA takes no bound parameter).
PRAGMA application_id = {{id}}

-- In WAL mode, NORMAL does not flush at commit (a commit survives a crash of the process, not of
-- the machine).
PRAGMA synchronous = NORMAL

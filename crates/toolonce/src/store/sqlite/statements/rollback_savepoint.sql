-- Undoes one write of a batch and leaves the batch's transaction open for the others.
ROLLBACK TO toolonce_write;
RELEASE toolonce_write

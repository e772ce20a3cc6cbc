-- Keeps a write that succeeded inside a batch: its changes commit with the batch.
RELEASE toolonce_write

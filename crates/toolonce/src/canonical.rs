//! RFC 8785 (JSON Canonicalization Scheme) — being written.

//! `toolonce._native.Entry`: one live entry of a store as the operator API reads it
//! (`Store.get`, `Store.list`), holding the core's [`toolonce::Entry`] whole. The Python
//! `toolonce.Entry` wraps it for people; a resolve or a removal is handed it back as the entry
//! `seen`, so what the store compares is exactly what the store reported, never a copy the
//! caller could have edited. The owner token is never shown: only its digest.

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use toolonce::{EntryState, Seen};

use crate::convert::to_py;

#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Entry {
    pub(crate) inner: toolonce::Entry,
}

/// Seconds since the epoch, as Python's `datetime.fromtimestamp` takes them.
fn seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

impl Entry {
    fn unsettled(&self) -> bool {
        matches!(
            self.inner.state,
            EntryState::Running { .. } | EntryState::Unknown { .. }
        )
    }
}

#[pymethods]
impl Entry {
    #[getter]
    fn key(&self) -> &str {
        self.inner.key.as_str()
    }

    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }

    #[getter]
    fn scope(&self) -> Option<&str> {
        self.inner.about.scope.as_deref()
    }

    #[getter]
    fn tool(&self) -> Option<&str> {
        self.inner.about.tool.as_deref()
    }

    #[getter]
    fn detail(&self) -> Option<&str> {
        self.inner.about.detail.as_deref()
    }

    #[getter]
    fn fingerprint(&self) -> Option<&str> {
        self.inner.fingerprint.as_ref().map(|f| f.as_str())
    }

    /// `None` when its writer did not record it (0 in the core).
    #[getter]
    fn attempts(&self) -> Option<u32> {
        (self.inner.attempts > 0).then_some(self.inner.attempts)
    }

    #[getter]
    fn started_at(&self) -> f64 {
        seconds(self.inner.started_at)
    }

    #[getter]
    fn first_started_at(&self) -> Option<f64> {
        self.inner.first_started_at.map(seconds)
    }

    #[getter]
    fn settled_at(&self) -> Option<f64> {
        self.inner.settled_at.map(seconds)
    }

    /// Running: when its lease ends; unknown: when it ended.
    #[getter]
    fn lease_ends_at(&self) -> Option<f64> {
        self.inner
            .expires_at
            .filter(|_| self.unsettled())
            .map(seconds)
    }

    /// Done or failed: when the store forgets it.
    #[getter]
    fn expires_at(&self) -> Option<f64> {
        self.inner
            .expires_at
            .filter(|_| !self.unsettled())
            .map(seconds)
    }

    /// 12 hex digits of the SHA-256 of the owner (running or unknown): never the token.
    #[getter]
    fn owner_digest(&self) -> Option<String> {
        Seen::of(&self.inner).and_then(|seen| seen.owner_digest())
    }

    /// Done: the recorded result (else `None`).
    #[getter]
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.inner.state {
            EntryState::Done { result, .. } => to_py(py, &result.to_value()),
            _ => Ok(py.None()),
        }
    }

    /// Failed: the recorded error as `(message, detail)` (else `None`).
    #[getter]
    fn error(&self, py: Python<'_>) -> PyResult<Option<(String, Py<PyAny>)>> {
        match &self.inner.state {
            EntryState::Failed { error, .. } => {
                let detail = match &error.detail {
                    Some(detail) => to_py(py, detail)?,
                    None => py.None(),
                };
                Ok(Some((error.message.clone(), detail)))
            }
            _ => Ok(None),
        }
    }
}

//! `toolonce._native.Reply`: what the Python side answers the layer, read in one place for
//! both pumps (the sync [`run_inline`](crate::inline) and the async [`Call`](crate::call)):
//! the tool's outcome (its result, or the exception it raised) or a verify probe's verdict.
//!
//! A reply is converted when it is made, on the caller's thread with the GIL, so the Python
//! protocol learns at once what the caller must be told (`Reply.error`) and the layer's task
//! receives plain Rust values.
//!
//! The verdict on a tool's outcome is applied here, by one rule: **once the tool may have
//! begun, a failure to read, convert or store its outcome never releases the operation; only
//! the tool's own declared transient error releases.** A result that is not JSON, a detail that
//! is not, a message that cannot be read: each is recorded as a permanent failure that says
//! what happened, never sent to the layer as transient (which would let a duplicate run the
//! tool again beside an effect that may have happened).

use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use serde_json::Value;
use toolonce::{ToolError, Verified};

use crate::convert::{text, to_json};

/// What a reply carries to the layer.
pub(crate) enum Answer {
    /// The tool's outcome, for a `run` event.
    Ran(Result<Value, ToolError>),
    /// A verify probe's verdict, for a `verify` event.
    Verified(Verified),
}

/// A reply to one event of a write call (see the module docs).
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Reply {
    answer: Mutex<Option<Answer>>,
    /// The exception the caller gets instead of the tool's own outcome (the result could not
    /// be stored), or that explains a hold (the verified result could not be recorded).
    error: Option<Py<PyAny>>,
}

impl Reply {
    fn new(answer: Answer, error: Option<PyErr>, py: Python<'_>) -> Reply {
        Reply {
            answer: Mutex::new(Some(answer)),
            error: error.map(|e| e.into_value(py).into_any()),
        }
    }

    /// What this reply carries; a reply is sent once.
    pub(crate) fn take(&self) -> PyResult<Answer> {
        self.answer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this reply was already sent"))
    }

    /// The tool's outcome this reply carries.
    pub(crate) fn take_ran(&self) -> PyResult<Result<Value, ToolError>> {
        match self.take()? {
            Answer::Ran(outcome) => Ok(outcome),
            Answer::Verified(_) => Err(PyRuntimeError::new_err(
                "a verify reply was given to a run event",
            )),
        }
    }

    /// The verdict this reply carries.
    pub(crate) fn take_verified(&self) -> PyResult<Verified> {
        match self.take()? {
            Answer::Verified(verified) => Ok(verified),
            Answer::Ran(_) => Err(PyRuntimeError::new_err(
                "a run reply was given to a verify event",
            )),
        }
    }
}

/// The message of a tool's exception, never refused: its `str()` (losslessly, see
/// [`text`]), its class name when that is empty, and a sentence saying so when `str()` raises.
fn message_of(exc: &Bound<'_, PyAny>) -> String {
    let class = exc
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".to_owned());
    match exc.str().and_then(|s| text(s.as_any())) {
        Ok(message) if !message.is_empty() => message,
        Ok(_) => class,
        Err(e) => format!("{class} (its message cannot be read: {e})"),
    }
}

#[pymethods]
impl Reply {
    /// The tool returned `value`. A value that is not JSON cannot be stored: the tool ran, so
    /// it is recorded as a permanent failure, and the caller gets a `TypeError` (`error`).
    #[staticmethod]
    fn result(py: Python<'_>, value: &Bound<'_, PyAny>) -> Reply {
        match to_json(value, 0) {
            Ok(value) => Reply::new(Answer::Ran(Ok(value)), None, py),
            Err(e) => {
                let message = format!(
                    "the tool ran but its result cannot be stored: {}",
                    e.value(py)
                );
                let error = PyTypeError::new_err(message.clone());
                Reply::new(
                    Answer::Ran(Err(ToolError::permanent(message))),
                    Some(error),
                    py,
                )
            }
        }
    }

    /// The tool raised `exc`: stored and replayed when `permanent` (with `detail`, if JSON),
    /// released otherwise. The caller gets `exc` itself, so nothing here raises.
    #[staticmethod]
    #[pyo3(signature = (exc, permanent, detail=None))]
    fn failure(
        py: Python<'_>,
        exc: &Bound<'_, PyAny>,
        permanent: bool,
        detail: Option<&Bound<'_, PyAny>>,
    ) -> Reply {
        let mut message = message_of(exc);
        // A detail that is not JSON cannot be stored: the failure is stored without it, and its
        // message says so (never refused: the tool ran).
        let detail = match detail.filter(|d| !d.is_none()).map(|d| to_json(d, 0)) {
            None => None,
            Some(Ok(detail)) => Some(detail),
            Some(Err(e)) => {
                let reason = e.value(py).to_string();
                message = format!("{message} (its detail was not stored: {reason})");
                None
            }
        };
        let mut error = if permanent {
            ToolError::permanent(message)
        } else {
            ToolError::transient(message)
        };
        if let Some(detail) = detail {
            error = error.with_detail(detail);
        }
        Reply::new(Answer::Ran(Err(error)), None, py)
    }

    /// A verify probe's verdict: "done" (with the result to record), "not_done" or
    /// "cannot_tell".
    #[staticmethod]
    #[pyo3(signature = (verdict, result=None))]
    fn verified(
        py: Python<'_>,
        verdict: &str,
        result: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Reply> {
        let verified = match verdict {
            "done" => Verified::Done(match result {
                Some(result) => to_json(result, 0)?,
                None => Value::Null,
            }),
            "not_done" => Verified::NotDone,
            "cannot_tell" => Verified::CannotTell,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown verdict {other:?}: expected done, not_done or cannot_tell"
                )));
            }
        };
        Ok(Reply::new(Answer::Verified(verified), None, py))
    }

    /// The exception the caller gets instead of the tool's own outcome, if any.
    #[getter]
    fn error(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.error.as_ref().map(|e| e.clone_ref(py))
    }
}

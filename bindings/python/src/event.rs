//! What the layer tells the Python side of a write call, as the tuples the Python protocol
//! reads: `("run", key, may_have_run_before)`, `("verify", key)` and
//! `("done", outcome, key, ok, payload, notice, note)`, `note` the replay's note for the
//! model (the core's text: when it took effect, how to repeat it on purpose) or `None`.

use pyo3::prelude::*;
use toolonce::WriteAnswer;

use crate::convert::to_py;

/// What the layer tells the Python caller.
pub(crate) enum Event {
    /// The claim is won: run the function now and reply with the tool's outcome.
    Run {
        key: String,
        may_have_run_before: bool,
    },
    /// The operation is unknown and the policy is verify: ask the probe, reply with its
    /// verdict.
    Verify { key: String },
    /// The call is over.
    Done(WriteAnswer),
}

impl Event {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let tuple = match self {
            Event::Run {
                key,
                may_have_run_before,
            } => ("run", key, may_have_run_before)
                .into_pyobject(py)?
                .into_any(),
            Event::Verify { key } => ("verify", key).into_pyobject(py)?.into_any(),
            Event::Done(answer) => {
                let key = answer.key.as_str().to_owned();
                let outcome = answer.outcome.as_str();
                let notice = answer.notice;
                let note = answer.replay.map(|r| r.text);
                match answer.result {
                    Ok(value) => ("done", outcome, key, true, to_py(py, &value)?, notice, note)
                        .into_pyobject(py)?
                        .into_any(),
                    Err(error) => {
                        let class = if error.is_transient() {
                            "transient"
                        } else {
                            "permanent"
                        };
                        let detail = match &error.detail {
                            Some(detail) => to_py(py, detail)?,
                            None => py.None(),
                        };
                        let error = (error.message, class, detail).into_pyobject(py)?;
                        ("done", outcome, key, false, error, notice, note)
                            .into_pyobject(py)?
                            .into_any()
                    }
                }
            }
        };
        Ok(tuple.unbind())
    }
}

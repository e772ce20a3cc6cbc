//! `toolonce._native.Tool`: a write tool's settings, checked once when the function is
//! decorated, and `derive_key`, the core's key derivation for Python.

use std::time::Duration;

use pyo3::prelude::*;
use serde_json::Value;
use toolonce::key::{Derived, KeyFields};
use toolonce::{InFlight, OnExpired, WriteOptions};

use crate::convert::to_json;
use crate::errors::{config_error, map_error};

/// A write tool's settings, checked once when the function is decorated.
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) options: WriteOptions,
    key_fields: Option<KeyFields>,
}

impl Tool {
    /// The operation `args` (a Python value) make for this tool in `scope`.
    pub(crate) fn derive(
        &self,
        py: Python<'_>,
        scope: &str,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<Derived> {
        let args = to_json(args, 0)?;
        toolonce::key::derive(scope, &self.name, &args, self.key_fields.as_ref())
            .map_err(|e| map_error(py, &e))
    }
}

fn duration(py: Python<'_>, name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        config_error(
            py,
            format!("{name} must be a non-negative number of seconds, not {seconds}"),
        )
    })
}

#[pymethods]
impl Tool {
    /// `wait` is `None` for "reject", else the seconds a duplicate waits for the running call;
    /// `on_expired` is "hold", "rerun" or "verify".
    #[new]
    #[pyo3(signature = (name, lease, retention, wait, on_expired, key_fields))]
    fn new(
        py: Python<'_>,
        name: String,
        lease: f64,
        retention: f64,
        wait: Option<f64>,
        on_expired: &str,
        key_fields: Option<Vec<String>>,
    ) -> PyResult<Tool> {
        let in_flight = match wait {
            None => InFlight::Reject,
            Some(seconds) => InFlight::Wait(duration(py, "Wait", seconds)?),
        };
        let on_expired: OnExpired = on_expired.parse().map_err(|e| map_error(py, &e))?;
        let options = WriteOptions::new()
            .lease(duration(py, "lease", lease)?)
            .retention(duration(py, "retention", retention)?)
            .in_flight(in_flight)
            .on_expired(on_expired);
        options.validate().map_err(|e| map_error(py, &e))?;
        let key_fields = key_fields
            .map(KeyFields::new)
            .transpose()
            .map_err(|e| map_error(py, &e))?;
        toolonce::key::derive("scope", &name, &Value::Null, None).map_err(|e| map_error(py, &e))?;
        Ok(Tool {
            name,
            options,
            key_fields,
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
}

/// The operation key of `tool` called in `scope` with `args` (the core's `key::derive`).
#[pyfunction]
#[pyo3(signature = (scope, tool, args, key_fields=None))]
pub(crate) fn derive_key(
    py: Python<'_>,
    scope: &str,
    tool: &str,
    args: &Bound<'_, PyAny>,
    key_fields: Option<Vec<String>>,
) -> PyResult<String> {
    let args = to_json(args, 0)?;
    let fields = key_fields
        .map(KeyFields::new)
        .transpose()
        .map_err(|e| map_error(py, &e))?;
    let derived = toolonce::key::derive(scope, tool, &args, fields.as_ref())
        .map_err(|e| map_error(py, &e))?;
    Ok(derived.key.as_str().to_owned())
}

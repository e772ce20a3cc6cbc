//! `toolonce._native.Tool`: a write tool's settings, checked once when the function is
//! decorated, and `derive_key`, the core's key derivation for Python.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;
use toolonce::key::{Derived, KeyFields};
use toolonce::repeat::{InvalidRepeat, Repeat};
use toolonce::{InFlight, OnExpired, WriteOptions};

use crate::convert::{text, to_json};
use crate::errors::{config_error, error_with_detail, map_error};

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
        let (args, repeat) = split(
            py,
            &self.name,
            args,
            self.options.repeat_argument.as_deref(),
        )?;
        toolonce::key::derive_repeat(scope, &self.name, &args, self.key_fields.as_ref(), repeat)
            .map_err(|e| map_error(py, &e))
    }
}

/// The arguments as JSON without the repeat ordinal `name` (when the tool has one and the
/// arguments are a dict holding it), and the ordinal, read by the core's
/// [`toolonce::repeat::take`]. A value that is not JSON at all (an integer beyond 64 bits, a
/// set) is no ordinal either. A refused ordinal is an `InvalidArgumentsError` whose message is
/// the core's refusal for the model and whose detail names the argument (`{"repeat": name}`).
fn split(
    py: Python<'_>,
    tool: &str,
    args: &Bound<'_, PyAny>,
    name: Option<&str>,
) -> PyResult<(Value, Repeat)> {
    let member = match (name, args.cast::<PyDict>()) {
        (Some(name), Ok(dict)) => dict.get_item(name)?.map(|value| (name, dict, value)),
        _ => None,
    };
    let Some((name, dict, value)) = member else {
        return Ok((to_json(args, 0)?, Repeat::FIRST));
    };
    let rest = dict.copy()?;
    rest.del_item(name)?;
    let rest = to_json(rest.as_any(), 0)?;
    let refused = |got: String| {
        let refused = InvalidRepeat {
            name: name.to_owned(),
            got,
        };
        let detail = PyDict::new(py);
        match detail.set_item("repeat", name) {
            Ok(()) => error_with_detail(
                py,
                "InvalidArgumentsError",
                refused.message(tool),
                detail.into_any(),
            ),
            Err(e) => e,
        }
    };
    let mut member = serde_json::Map::new();
    match to_json(&value, 1) {
        Ok(json) => member.insert(name.to_owned(), json),
        Err(_) => {
            let shown = value.str().and_then(|s| text(s.as_any()))?;
            return Err(refused(shown));
        }
    };
    let mut member = Value::Object(member);
    match toolonce::repeat::take(&mut member, name) {
        Ok(repeat) => Ok((rest, repeat)),
        Err(e) => Err(refused(e.got)),
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
    #[pyo3(signature = (name, lease, retention, wait, on_expired, key_fields, repeat_argument=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        name: String,
        lease: f64,
        retention: f64,
        wait: Option<f64>,
        on_expired: &str,
        key_fields: Option<Vec<String>>,
        repeat_argument: Option<String>,
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
            .on_expired(on_expired)
            .repeat_argument(repeat_argument.as_deref());
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

    /// The name of the tool's repeat argument, or `None` when it has none.
    #[getter]
    fn repeat_argument(&self) -> Option<&str> {
        self.options.repeat_argument.as_deref()
    }
}

/// The operation key of `tool` called in `scope` with `args` (the core's `key::derive_repeat`):
/// with `repeat_argument`, that top-level member of `args` is the repeat ordinal, taken out.
#[pyfunction]
#[pyo3(signature = (scope, tool, args, key_fields=None, repeat_argument=None))]
pub(crate) fn derive_key(
    py: Python<'_>,
    scope: &str,
    tool: &str,
    args: &Bound<'_, PyAny>,
    key_fields: Option<Vec<String>>,
    repeat_argument: Option<&str>,
) -> PyResult<String> {
    let (args, repeat) = split(py, tool, args, repeat_argument)?;
    let fields = key_fields
        .map(KeyFields::new)
        .transpose()
        .map_err(|e| map_error(py, &e))?;
    let derived = toolonce::key::derive_repeat(scope, tool, &args, fields.as_ref(), repeat)
        .map_err(|e| map_error(py, &e))?;
    Ok(derived.key.as_str().to_owned())
}

/// A tool's JSON Schema of its arguments with the repeat argument `name` among its properties
/// (the core's [`toolonce::repeat::add_to_schema`]), or `None` when the schema already has a
/// property of that name (the tool's own, which it keeps) or is not an object schema.
#[pyfunction]
pub(crate) fn add_repeat_to_schema(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
    name: &str,
) -> PyResult<Option<Py<PyAny>>> {
    let mut schema = to_json(schema, 0)?;
    if !toolonce::repeat::add_to_schema(&mut schema, name) {
        return Ok(None);
    }
    crate::convert::to_py(py, &schema).map(Some)
}

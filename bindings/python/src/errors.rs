//! The core's errors as the exceptions of `toolonce._errors` that a user can catch.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// The exception classes of `toolonce._errors`, looked up once.
fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("toolonce._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// A core error as the Python exception a user can catch.
pub(crate) fn map_error(py: Python<'_>, e: &toolonce::Error) -> PyErr {
    let text = e.report().to_string();
    let class = match e {
        _ if e.is_store_error() => "StoreUnavailableError",
        toolonce::Error::InvalidKeyPart { .. }
        | toolonce::Error::InvalidArguments(_)
        | toolonce::Error::ArgumentsTooLarge { .. }
        | toolonce::Error::TooDeep { .. } => "InvalidArgumentsError",
        _ => "ConfigError",
    };
    match error_class(py, class) {
        Ok(class) => match class.call1((text,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// The exception `class` of `toolonce._errors` saying `message`, about the operation `key`.
pub(crate) fn error_of(py: Python<'_>, class: &str, message: String, key: Option<&str>) -> PyErr {
    match error_class(py, class) {
        Ok(class) => match class.call1((message, key)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// The exception `class` of `toolonce._errors` saying `message`, with `detail` (no key).
pub(crate) fn error_with_detail(
    py: Python<'_>,
    class: &str,
    message: String,
    detail: Bound<'_, PyAny>,
) -> PyErr {
    match error_class(py, class) {
        Ok(class) => match class.call1((message, py.None(), detail)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// A [`ConfigError`](toolonce::Error::Config) saying `message`.
pub(crate) fn config_error(py: Python<'_>, message: String) -> PyErr {
    map_error(py, &toolonce::Error::Config(message))
}

//! Values crossing the boundary: Python objects as JSON for the core (arguments, results,
//! details, verified results) and JSON as Python objects for the caller (replayed results).
//! Also the text of a Python string that may not be valid UTF-8 (a lone surrogate).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

/// Nesting deeper than this is refused while converting (the core refuses less deep nesting
/// anyway); it also stops a self-containing list from recursing forever.
const MAX_DEPTH: usize = 200;

/// A Python value as JSON: dict (str keys), list, tuple, str, int (64-bit), float (finite),
/// bool, None, and objects with pydantic's `model_dump`.
pub(crate) fn to_json(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the value nests deeper than {MAX_DEPTH} levels (or contains itself)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!(
            "the integer {obj} does not fit in 64 bits; pass it as a string"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let f = f.value();
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{f} is not a JSON number")));
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Value::String(obj.extract::<String>()?));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (k, v) in dict.iter() {
            if !k.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "JSON object keys must be str, not {}",
                    k.get_type().name()?
                )));
            }
            map.insert(k.extract::<String>()?, to_json(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if obj.hasattr("model_dump")? && !obj.is_instance_of::<pyo3::types::PyType>() {
        let kwargs = PyDict::new(obj.py());
        kwargs.set_item("mode", "json")?;
        let dumped = obj.call_method("model_dump", (), Some(&kwargs))?;
        return to_json(&dumped, depth + 1);
    }
    Err(PyTypeError::new_err(format!(
        "a value of type {} is not JSON (dict, list, tuple, str, int, float, bool, None or a \
         pydantic model)",
        obj.get_type().name()?
    )))
}

/// JSON as Python: dict, list, str, int, float, bool, None.
pub(crate) fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any().unbind()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any().unbind()
            } else {
                n.as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

/// The text of `obj` (a `str`), losslessly: a string Rust can hold (valid UTF-8) as it is, and
/// one that cannot (a lone surrogate, as `os.fsdecode` makes of a non-UTF-8 byte) with those
/// code points written as `\udcXX` escapes (`backslashreplace`), so the text is never refused
/// and the escape says what was there.
pub(crate) fn text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.extract::<String>() {
        return Ok(s);
    }
    let escaped = obj
        .call_method1("encode", ("utf-8", "backslashreplace"))?
        .call_method1("decode", ("utf-8",))?;
    escaped.extract::<String>()
}

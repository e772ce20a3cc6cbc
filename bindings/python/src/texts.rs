//! `text` and `templates`: the core's model-facing texts (`data/texts.json`) for the Python
//! package, read through the core rather than from a copy, so Python words an answer as every
//! other implementation does.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use toolonce::texts::Text;

/// The text `name` with `values` in place of its placeholders. A name the file lacks, a
/// placeholder without a value, or a value for none, is a bug of the caller: `ValueError`.
#[pyfunction]
pub(crate) fn text(name: &str, values: HashMap<String, String>) -> PyResult<String> {
    let text = Text::named(name)
        .ok_or_else(|| PyValueError::new_err(format!("no text is named {name:?}")))?;
    let values: Vec<(&str, &str)> = values
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if !text.fits(&values) {
        let given: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
        return Err(PyValueError::new_err(format!(
            "the text {name} takes the values {:?}, not {given:?}",
            text.placeholders()
        )));
    }
    Ok(text.fill(&values))
}

/// Every template by name, as the file has it (for the package's tests).
#[pyfunction]
pub(crate) fn templates() -> HashMap<&'static str, String> {
    Text::ALL
        .iter()
        .map(|t| {
            let unfilled: Vec<(&str, String)> = t
                .placeholders()
                .iter()
                .map(|p| (*p, format!("{{{p}}}")))
                .collect();
            let values: Vec<(&str, &str)> =
                unfilled.iter().map(|(p, v)| (*p, v.as_str())).collect();
            (t.name(), t.fill(&values))
        })
        .collect()
}

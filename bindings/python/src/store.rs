//! `toolonce._native.Store`: a store opened from a URL, the core's [`Layer`] over it, shared by
//! every tool given it.

use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use toolonce::Layer;

use crate::errors::map_error;
use crate::runtime::runtime;

/// A store opened from a URL: the core's `Arc<dyn Store>`, shared by every tool given it.
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Store {
    layer: Mutex<Option<Layer>>,
    /// The URL with its secrets masked, for `repr` and messages.
    url: String,
}

impl Store {
    pub(crate) fn layer(&self) -> PyResult<Layer> {
        self.layer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err(format!("the store {} is closed", self.url)))
    }
}

#[pymethods]
impl Store {
    /// Drops this handle's connection pool; calls made with the store afterwards raise.
    fn close(&self) {
        self.layer.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.layer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __repr__(&self) -> String {
        format!("<toolonce.Store {}>", self.url)
    }
}

/// Opens the store `url` names (memory://, sqlite://PATH, redis://…, postgres://…), connecting
/// with the GIL released.
#[pyfunction]
pub(crate) fn open_store(py: Python<'_>, url: &str) -> PyResult<Store> {
    let opened = py.detach(|| runtime().block_on(toolonce::store::open(url)));
    let store = opened.map_err(|e| map_error(py, &e))?;
    Ok(Store {
        layer: Mutex::new(Some(Layer::new(store))),
        url: toolonce::store::redact_url(url),
    })
}

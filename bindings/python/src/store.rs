//! `toolonce._native.Store`: a store opened from a URL, the core's [`Layer`] over it, shared by
//! every tool given it, in the process that opened it.
//!
//! A store's connections (and the SQLite store's connection thread) do not survive `fork()`:
//! in a forked child a store of the parent's refuses calls, saying to open one in the child,
//! and is never closed there (closing would act on connections the parent still uses).

use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use toolonce::Layer;

use crate::errors::{config_error, map_error};
use crate::runtime::runtime;
use crate::signals::with_blocked;

/// A store opened from a URL: the core's `Arc<dyn Store>`, shared by every tool given it.
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Store {
    layer: Mutex<Option<Layer>>,
    /// The URL with its secrets masked, for `repr` and messages.
    url: String,
    /// The process that opened it.
    pid: u32,
}

impl Store {
    pub(crate) fn layer(&self) -> PyResult<Layer> {
        if self.pid != std::process::id() {
            return Err(Python::attach(|py| {
                config_error(
                    py,
                    format!(
                        "the store {} was opened in process {} before it forked; a store's \
                         connections do not survive fork(): open it again in this process \
                         (toolonce.open_store) and decorate the tools with that one",
                        self.url, self.pid
                    ),
                )
            }));
        }
        self.layer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err(format!("the store {} is closed", self.url)))
    }

    /// Takes the layer out, to drop it; in a forked child it is forgotten instead.
    fn take(&self) {
        let layer = self.layer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if self.pid != std::process::id() {
            std::mem::forget(layer);
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.take();
    }
}

#[pymethods]
impl Store {
    /// Drops this handle's connection pool; calls made with the store afterwards raise.
    fn close(&self) {
        self.take();
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
/// with the GIL released, and with signals blocked: the SQLite store's connection thread is
/// started here, and must not take a Ctrl-C meant for Python (see `signals`).
#[pyfunction]
pub(crate) fn open_store(py: Python<'_>, url: &str) -> PyResult<Store> {
    let opened = py.detach(|| with_blocked(|| runtime().block_on(toolonce::store::open(url))));
    let store = opened.map_err(|e| map_error(py, &e))?;
    Ok(Store {
        layer: Mutex::new(Some(Layer::new(store))),
        url: toolonce::store::redact_url(url),
        pid: std::process::id(),
    })
}

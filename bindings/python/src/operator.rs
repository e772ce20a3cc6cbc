//! The operator's side of a store (docs/contract.md, "Store operations"): [`get`], [`list`],
//! and the fenced writes [`resolve`] and [`remove`], as `toolonce resolve | rm` do them. Each
//! write acts only on the entry `seen` that `get` or `list` returned, compared by the store in
//! the same atomic step as the write; a write whose answer was lost raises
//! `EffectUnknownError` (it may have applied), never an answer that says nothing was done.
//!
//! Each function runs on the module's runtime: with `deliver` unset the caller's thread blocks
//! on it, the GIL released (the sync API); with it set the function returns at once and
//! `deliver(ok, value)` is later called on the Python thread (the async API, which hands the
//! value to its event loop). The Python half, which checks the arguments people give, is
//! `python/toolonce/_operator.py`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use toolonce::{
    Error, ListQuery, OperationKey, Removed, Resolution, Resolved, Seen, SeenSettled, State,
    ToolError,
};

use crate::convert::to_json;
use crate::entry::Entry;
use crate::errors::{error_of, map_error};
use crate::runtime::{runtime, to_python};
use crate::store::Store;

type Finish<T> = Box<dyn FnOnce(Python<'_>, toolonce::Result<T>) -> PyResult<Py<PyAny>> + Send>;

/// Runs `work` on the runtime and `finish` on its outcome: on this thread, or handed to
/// `deliver` (see the module docs).
fn drive<T: Send + 'static>(
    py: Python<'_>,
    deliver: Option<Py<PyAny>>,
    work: impl Future<Output = toolonce::Result<T>> + Send + 'static,
    finish: Finish<T>,
) -> PyResult<Py<PyAny>> {
    let Some(deliver) = deliver else {
        let outcome = py.detach(|| runtime().block_on(work));
        return finish(py, outcome);
    };
    runtime().spawn(async move {
        let outcome = work.await;
        to_python(move |py| {
            let args = match finish(py, outcome) {
                Ok(value) => (true, value),
                Err(e) => (false, e.into_value(py).into_any()),
            };
            if let Err(e) = deliver.call1(py, args) {
                e.write_unraisable(py, None);
            }
        });
    });
    Ok(py.None())
}

/// An answer known without asking the store: returned, or handed to `deliver` at once (an
/// async caller awaits what `deliver` gets, never the return value).
fn answered(
    py: Python<'_>,
    deliver: Option<Py<PyAny>>,
    value: PyResult<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    match deliver {
        None => value,
        Some(deliver) => {
            deliver.call1(py, (true, value?))?;
            Ok(py.None())
        }
    }
}

fn invalid(py: Python<'_>, message: String, key: Option<&str>) -> PyErr {
    error_of(py, "InvalidArgumentsError", message, key)
}

/// `key` as an operation key, or a clear error saying what one looks like.
fn key_of(py: Python<'_>, key: &str, doing: &str) -> PyResult<OperationKey> {
    key.parse().map_err(|_| {
        invalid(
            py,
            format!(
                "{doing}: invalid operation key {key:?}: expected \"idem:\" followed by 32 \
                 lowercase hex digits"
            ),
            None,
        )
    })
}

/// The entry seen, checked to be of `key`.
fn seen_of<'a>(
    py: Python<'_>,
    seen: &'a Entry,
    key: &OperationKey,
    doing: &str,
) -> PyResult<&'a toolonce::Entry> {
    if seen.inner.key != *key {
        return Err(invalid(
            py,
            format!(
                "{doing}: the entry seen is of {}, not {key}",
                seen.inner.key
            ),
            Some(key.as_str()),
        ));
    }
    Ok(&seen.inner)
}

/// An error of a fenced write: the store failed before it answered, so the write may or may
/// not have been applied (`EffectUnknownError`); any other error as it is.
fn unknown_if_lost(py: Python<'_>, e: &Error, what: &str, key: &OperationKey) -> PyErr {
    match e {
        Error::Unavailable(_) | Error::Store(_) => error_of(
            py,
            "EffectUnknownError",
            format!(
                "the {what} of {key} may or may not have been applied: the store failed before \
                 it answered ({}). Read the entry again with store.get(\"{key}\") (`toolonce \
                 show {key}`).",
                e.report()
            ),
            Some(key.as_str()),
        ),
        other => map_error(py, other),
    }
}

fn entry_py(py: Python<'_>, entry: toolonce::Entry) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Entry { inner: entry })?.into_any())
}

/// An operator's answer: `(kind, entry or None)`.
fn answer(py: Python<'_>, kind: &str, entry: Option<toolonce::Entry>) -> PyResult<Py<PyAny>> {
    let entry = match entry {
        Some(entry) => entry_py(py, entry)?,
        None => py.None(),
    };
    Ok((kind, entry).into_pyobject(py)?.into_any().unbind())
}

/// The live entry of `key`, or `None`.
#[pyfunction]
#[pyo3(signature = (store, key, deliver=None))]
pub(crate) fn get(
    py: Python<'_>,
    store: &Store,
    key: &str,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let key = key_of(py, key, "get")?;
    let backend = Arc::clone(store.layer()?.store());
    let finish: Finish<Option<toolonce::Entry>> = Box::new(|py, found| match found {
        Ok(Some(entry)) => entry_py(py, entry),
        Ok(None) => Ok(py.None()),
        Err(e) => Err(map_error(py, &e)),
    });
    drive(py, deliver, async move { backend.get(&key).await }, finish)
}

/// One page of live entries: `([Entry], next cursor or None)`.
#[pyfunction]
#[pyo3(signature = (store, state, scope, tool, cursor, limit, deliver=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn list(
    py: Python<'_>,
    store: &Store,
    state: Option<&str>,
    scope: Option<String>,
    tool: Option<String>,
    cursor: Option<String>,
    limit: usize,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let mut query = ListQuery::new().limit(limit);
    if let Some(state) = state {
        let state: State = state
            .parse()
            .map_err(|e: Error| invalid(py, format!("list: {e}"), None))?;
        query = query.state(state);
    }
    query.scope = scope;
    query.tool = tool;
    query.cursor = cursor;
    let backend = Arc::clone(store.layer()?.store());
    let finish: Finish<toolonce::store::Page> = Box::new(|py, page| {
        let page = page.map_err(|e| map_error(py, &e))?;
        let entries = page
            .entries
            .into_iter()
            .map(|entry| entry_py(py, entry))
            .collect::<PyResult<Vec<_>>>()?;
        let unreadable: Vec<(String, String)> = page
            .unreadable
            .into_iter()
            .map(|u| (u.key, u.reason))
            .collect();
        Ok((entries, page.next, unreadable)
            .into_pyobject(py)?
            .into_any()
            .unbind())
    });
    drive(
        py,
        deliver,
        async move { backend.list(&query).await },
        finish,
    )
}

/// What `kind` and `value` (checked by the Python half) resolve to.
fn resolution_of(
    py: Python<'_>,
    kind: &str,
    value: &Bound<'_, PyAny>,
    key: &OperationKey,
) -> PyResult<Resolution> {
    match kind {
        "done" => Ok(Resolution::Done(to_json(value, 0).map_err(|e| {
            invalid(
                py,
                format!("resolve({key}): the result is not JSON: {e}"),
                Some(key.as_str()),
            )
        })?)),
        "failed" => Ok(Resolution::Failed(ToolError::permanent(
            value.extract::<String>()?,
        ))),
        "release" => Ok(Resolution::Release),
        other => Err(invalid(
            py,
            format!("resolve({key}): unknown resolution {other:?}"),
            Some(key.as_str()),
        )),
    }
}

/// Settles the entry `seen` of `key` (unknown, or running with `force`): `(kind, entry)`, the
/// kind `applied`, `absent`, `settled`, `live` or `changed`, with the entry found on a refusal.
#[pyfunction]
#[pyo3(signature = (store, key, seen, kind, value, force, retention, deliver=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn resolve(
    py: Python<'_>,
    store: &Store,
    key: &str,
    seen: &Entry,
    kind: &str,
    value: &Bound<'_, PyAny>,
    force: bool,
    retention: f64,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let doing = format!("resolve({key})");
    let key = key_of(py, key, "resolve")?;
    let entry = seen_of(py, seen, &key, &doing)?;
    let resolution = resolution_of(py, kind, value, &key)?;
    // As `toolonce resolve`: a settled entry is never overwritten, and a live claim is its
    // owner's unless forced; both are answered from what was read, with nothing sent.
    let Some(fence) = Seen::of(entry) else {
        return answered(py, deliver, answer(py, "settled", Some(entry.clone())));
    };
    let fence = match entry.state() {
        State::Running if !force => {
            return answered(py, deliver, answer(py, "live", Some(entry.clone())));
        }
        State::Running => fence.even_if_live(),
        _ => fence,
    };
    let retention = Duration::try_from_secs_f64(retention)
        .map_err(|e| invalid(py, format!("{doing}: retention: {e}"), Some(key.as_str())))?;
    let backend = Arc::clone(store.layer()?.store());
    let written = key.clone();
    let finish: Finish<Resolved> = Box::new(move |py, resolved| match resolved {
        Ok(Resolved::Applied) => answer(py, "applied", None),
        Ok(Resolved::Absent) => answer(py, "absent", None),
        Ok(Resolved::Settled(entry)) => answer(py, "settled", Some(entry)),
        Ok(Resolved::Live(entry)) => answer(py, "live", Some(entry)),
        Ok(Resolved::Changed(entry)) => answer(py, "changed", Some(entry)),
        Ok(_) => Err(map_error(
            py,
            &Error::store("unexpected answer to a resolve"),
        )),
        Err(e) => Err(unknown_if_lost(py, &e, "resolution", &written)),
    });
    let work = async move { backend.resolve(&key, &fence, &resolution, retention).await };
    drive(py, deliver, work, finish)
}

/// Deletes the settled entry `seen` of `key`, and no other: `(kind, entry)` as for resolve,
/// the kind `applied`, `absent` or `changed`.
#[pyfunction]
#[pyo3(signature = (store, key, seen, deliver=None))]
pub(crate) fn remove(
    py: Python<'_>,
    store: &Store,
    key: &str,
    seen: &Entry,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let doing = format!("remove({key})");
    let key = key_of(py, key, "remove")?;
    let entry = seen_of(py, seen, &key, &doing)?;
    let Some(settled) = SeenSettled::of(entry) else {
        return Err(invalid(
            py,
            format!(
                "{doing}: the entry seen is {}: a claim is deleted only as the attempt read, \
                 with resolve(key, seen, \"release\")",
                entry.state()
            ),
            Some(key.as_str()),
        ));
    };
    let backend = Arc::clone(store.layer()?.store());
    let written = key.clone();
    let finish: Finish<Removed> = Box::new(move |py, removed| match removed {
        Ok(Removed::Applied) => answer(py, "applied", None),
        Ok(Removed::Absent) => answer(py, "absent", None),
        Ok(Removed::Changed(entry)) => answer(py, "changed", Some(entry)),
        Ok(_) => Err(map_error(
            py,
            &Error::store("unexpected answer to a removal"),
        )),
        Err(e) => Err(unknown_if_lost(py, &e, "removal", &written)),
    });
    drive(
        py,
        deliver,
        async move { backend.remove(&key, &settled).await },
        finish,
    )
}

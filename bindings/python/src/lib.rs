//! `toolonce._native`, the Rust half of the Python package: it maps the core's types and errors
//! to Python and runs the core's [`Layer`](toolonce::Layer) on a multi-thread Tokio runtime the
//! module owns.
//!
//! A write call claims on the layer and, when it wins the claim, hands a `run` event to the
//! Python caller and waits for its [`Reply`](reply::Reply). The Python function therefore runs
//! on the caller's own thread (sync) or event loop (async), with its context variables, while
//! the lease heartbeat, a task of the core, keeps renewing on a runtime worker. The call
//! protocol (what the Python side does with each event) is `python/toolonce/_protocol.py`; it
//! is driven by two pumps, the sync one over [`inline::run_inline`] and the async one over
//! [`poll::begin`] (polled on the event loop's thread; [`call::start`] where the loop cannot
//! watch a descriptor).
//!
//! The files, by job:
//! - `runtime.rs`: the runtime of each process (rebuilt after `fork()`), and the thread that
//!   enters Python for it, so that no runtime thread waits for the GIL;
//! - `signals.rs`: asynchronous signals kept off the module's threads, for Python's;
//! - `store.rs`, `tool.rs`: the store handle, and a tool's settings and key derivation;
//! - `event.rs`, `reply.rs`: what the layer tells Python, and what Python answers (where the
//!   verdict on a tool's outcome is applied);
//! - `inline.rs`, `poll.rs`, `call.rs`: the sync pump, the async pump, and the pump on the
//!   runtime for the loops `poll.rs` cannot wake and for a sync call nested in another's run;
//! - `operator.rs`, `entry.rs`: the operator API (get, list, and the fenced resolve and
//!   remove) and the entry it reads;
//! - `convert.rs`, `errors.rs`: values and errors across the boundary;
//! - `texts.rs`: the core's model-facing texts, for the package's answers.

use pyo3::prelude::*;

mod call;
mod convert;
mod entry;
mod errors;
mod event;
mod inline;
mod operator;
mod poll;
mod reply;
mod runtime;
mod signals;
mod store;
mod texts;
mod tool;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Built now, while the import holds the GIL: no Python code can fork meanwhile.
    runtime::process();
    // The repeat ordinal's default name and largest value: the core's, not copies.
    m.add("REPEAT_DEFAULT_NAME", toolonce::repeat::DEFAULT_NAME)?;
    m.add("REPEAT_MAX", toolonce::repeat::MAX)?;
    m.add_class::<store::Store>()?;
    m.add_class::<tool::Tool>()?;
    m.add_class::<call::Call>()?;
    m.add_class::<reply::Reply>()?;
    m.add_class::<poll::Pump>()?;
    m.add_class::<poll::Polled>()?;
    m.add_class::<entry::Entry>()?;
    m.add_function(wrap_pyfunction!(store::open_store, m)?)?;
    m.add_function(wrap_pyfunction!(tool::derive_key, m)?)?;
    m.add_function(wrap_pyfunction!(tool::add_repeat_to_schema, m)?)?;
    m.add_function(wrap_pyfunction!(call::start, m)?)?;
    m.add_function(wrap_pyfunction!(inline::run_inline, m)?)?;
    m.add_function(wrap_pyfunction!(poll::begin, m)?)?;
    m.add_function(wrap_pyfunction!(texts::text, m)?)?;
    m.add_function(wrap_pyfunction!(texts::templates, m)?)?;
    m.add_function(wrap_pyfunction!(operator::get, m)?)?;
    m.add_function(wrap_pyfunction!(operator::list, m)?)?;
    m.add_function(wrap_pyfunction!(operator::resolve, m)?)?;
    m.add_function(wrap_pyfunction!(operator::remove, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_shutdown, m)?)?;
    Ok(())
}

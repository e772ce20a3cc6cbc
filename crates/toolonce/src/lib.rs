//! toolonce makes every side-effecting tool call of an AI agent take effect once.
//!
//! (crate docs are written with the layer)

#![warn(missing_docs)]

pub mod canonical;
mod error;
pub mod key;

pub use error::{BoxError, Error, Result};

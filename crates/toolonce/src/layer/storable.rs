//! The rule that an outcome which cannot be stored never releases its operation, applied where
//! the tool has already run: a result nested deeper than a store may hold becomes a recorded
//! failure that says so, and an error's detail that deep is dropped (saying so) rather than
//! the error. Releasing instead would let every duplicate run the tool again, although it ran.

use std::borrow::Cow;

use serde_json::{Value, json};

use crate::store::MAX_STORED_DEPTH;
use crate::store::json::nesting_depth;
use crate::texts::Text;
use crate::tool::ToolError;

/// The key of [`ToolError::detail`] under which a recorded failure says why the tool's own
/// outcome could not be stored.
pub(crate) const UNSTORABLE: &str = "unstorable";

/// The outcome as it can be stored: the tool's own when every reader can read it, else the
/// failure (or the error without its detail) that stands for it.
pub(super) fn storable<'a>(
    tool: &str,
    result: &'a Result<Value, ToolError>,
) -> Cow<'a, Result<Value, ToolError>> {
    match result {
        Ok(value) => {
            let depth = nesting_depth(value);
            if depth <= MAX_STORED_DEPTH {
                return Cow::Borrowed(result);
            }
            let (depth, max) = (depth.to_string(), MAX_STORED_DEPTH.to_string());
            let why = Text::ResultTooDeep.fill(&[("depth", &depth), ("max", &max)]);
            Cow::Owned(Err(unstorable(tool, &why)))
        }
        Err(error) if error.is_transient() => Cow::Borrowed(result),
        Err(error) => {
            let Some(detail) = &error.detail else {
                return Cow::Borrowed(result);
            };
            let depth = nesting_depth(detail);
            if depth <= MAX_STORED_DEPTH {
                return Cow::Borrowed(result);
            }
            let (shown, max) = (depth.to_string(), MAX_STORED_DEPTH.to_string());
            let mut stored = ToolError::permanent(Text::DetailTooDeep.fill(&[
                ("message", &error.message),
                ("depth", &shown),
                ("max", &max),
            ]));
            stored.detail = Some(json!({ UNSTORABLE: "detail too deep", "depth": depth }));
            Cow::Owned(Err(stored))
        }
    }
}

/// The failure recorded for a tool that ran but whose outcome cannot be stored, `why` saying
/// what is wrong with it. Permanent: the tool ran, so a duplicate must not run it again; it
/// gets this text instead of the result.
pub(super) fn unstorable(tool: &str, why: &str) -> ToolError {
    ToolError::permanent(Text::Unstorable.fill(&[("tool", tool), ("why", why)]))
        .with_detail(json!({ UNSTORABLE: why }))
}

/// Whether settling `result` releases the operation (the tool's own transient error), which a
/// refused write cannot be turned into a record of.
pub(super) fn is_release(result: &Result<Value, ToolError>) -> bool {
    matches!(result, Err(error) if error.is_transient())
}

//! The note a replay tells the model over MCP (see [`toolonce::ReplayNote`]): a text content
//! item after the recorded ones, and the time the outcome was recorded in `_meta`.

use serde_json::{Value, json};
use toolonce::ReplayNote;
use toolonce::meta::RECORDED_AT;

/// A replayed `CallToolResult` with the note for the model: a text content item after the
/// recorded ones, and the time the outcome was recorded in `_meta` (the recorded content and
/// `isError` stay as they were).
pub(super) fn with_note(mut result: Value, note: &ReplayNote) -> Value {
    if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
        content.push(json!({"type": "text", "text": note.text}));
    }
    if let (Some(at), Some(meta)) = (
        note.recorded_at,
        result.get_mut("_meta").and_then(Value::as_object_mut),
    ) {
        let at = toolonce::layer::utc_seconds(at);
        meta.insert(RECORDED_AT.to_owned(), Value::String(at));
    }
    result
}

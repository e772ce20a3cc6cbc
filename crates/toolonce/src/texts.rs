//! Every text a model reads when toolonce answers instead of the tool (and the notices its
//! caller reads), from one file shared by every implementation (`data/texts.json`): the layer's
//! and the toolbox's answers here, the MCP proxy's in the CLI, the Python binding's through
//! [`Text::named`], the TypeScript package's from its embedded copy. Parsed once; each is a
//! template whose `{name}` placeholders are filled in one pass (a value that holds braces is
//! never read as one). [`Text`] names every template and its placeholders; the tests check the
//! file has exactly these and that every one is used by some implementation.

use std::collections::HashMap;
use std::sync::LazyLock;

/// The file, embedded at build time.
const FILE: &str = include_str!("../data/texts.json");

static TEXTS: LazyLock<HashMap<String, String>> = LazyLock::new(|| {
    let file: serde_json::Value = serde_json::from_str(FILE).expect("data/texts.json is JSON");
    serde_json::from_value(file["texts"].clone()).expect("data/texts.json has its texts")
});

/// Declares [`Text`] from one table: each template's variant, its name in the file, and its
/// placeholders.
macro_rules! texts {
    ($($variant:ident = $name:literal [$($placeholder:literal),*];)*) => {
        /// A template of `data/texts.json`, by its name there.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Text {
            $(#[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl Text {
            /// Every template, in the table's order.
            pub const ALL: &[Text] = &[$(Text::$variant),*];

            /// The template's name in the file.
            pub fn name(self) -> &'static str {
                match self {
                    $(Text::$variant => $name,)*
                }
            }

            /// The names of the template's placeholders, each filled by every use.
            pub fn placeholders(self) -> &'static [&'static str] {
                match self {
                    $(Text::$variant => &[$($placeholder),*],)*
                }
            }
        }
    };
}

texts! {
    Held = "held" ["tool", "key"];
    Unreadable = "unreadable" ["tool", "key", "report"];
    StoreUnavailable = "store_unavailable" ["tool", "report"];
    InFlight = "in_flight" ["tool", "key"];
    Conflict = "conflict" ["tool", "key"];
    Misconfigured = "misconfigured" ["tool", "error"];
    Unstorable = "unstorable" ["tool", "why"];
    NoticeUnreplicated = "notice_unreplicated" ["short"];
    NoticeNotOwner = "notice_not_owner" [];
    NoticeUnrecorded = "notice_unrecorded" [];
    UnknownTool = "unknown_tool" ["tool", "tools"];
    InvalidArguments = "invalid_arguments" ["tool", "reason"];
    NoToolUseName = "no_tool_use_name" [];
    NoFunctionName = "no_function_name" [];
    MisfitType = "misfit_type" [];
    Unserializable = "unserializable" ["error"];
    MisfitSchema = "misfit_schema" ["error"];
    Unkeyable = "unkeyable" ["error"];
    InexactInteger = "inexact_integer" ["integer"];
    Panicked = "panicked" ["tool"];
    ResultTooDeep = "result_too_deep" ["depth", "max"];
    ResultNotJson = "result_not_json" ["error"];
    StoreRefused = "store_refused" ["report"];
    DetailTooDeep = "detail_too_deep" ["message", "depth", "max"];
    DetailNotJson = "detail_not_json" ["message", "error"];
    CommandReplayed = "command_replayed" ["tool"];
    CommandUnstorable = "command_unstorable" ["tool", "type"];
    McpClientKey = "mcp_client_key" ["max", "why", "tool"];
    McpUnkeyable = "mcp_unkeyable" ["tool", "error"];
    McpUnreadableCall = "mcp_unreadable_call" ["tool"];
    McpIdTaken = "mcp_id_taken" ["tool", "why"];
    McpIdInProgress = "mcp_id_in_progress" [];
    McpIdGivenUp = "mcp_id_given_up" [];
    McpCancelled = "mcp_cancelled" [];
    McpUnreachable = "mcp_unreachable" [];
    McpTimedOut = "mcp_timed_out" ["tool", "after", "key", "lease", "after_lease"];
    McpServerGone = "mcp_server_gone" ["tool", "key", "lease", "after_lease"];
    McpAfterLeaseRerun = "mcp_after_lease_rerun" [];
    McpAfterLeaseHold = "mcp_after_lease_hold" ["key"];
    McpGivenUp = "mcp_given_up" ["tool", "key", "what", "lease", "after_lease"];
    McpGivenUpGone = "mcp_given_up_gone" [];
    McpGivenUpTimedOut = "mcp_given_up_timed_out" [];
    McpGivenUpHold = "mcp_given_up_hold" ["key"];
    McpClientKeyConflict = "mcp_client_key_conflict" ["tool", "key"];
    McpServerError = "mcp_server_error" ["text"];
    McpInputRequired = "mcp_input_required" [];
    McpToolError = "mcp_tool_error" [];
    McpKeyNotString = "mcp_key_not_string" ["kind"];
    McpKeyEmpty = "mcp_key_empty" [];
    McpKeyNotVisible = "mcp_key_not_visible" ["at"];
    McpKeyTooLong = "mcp_key_too_long" ["length"];
    McpRequestIdReused = "mcp_request_id_reused" [];
    McpBatchRefused = "mcp_batch_refused" ["why"];
    McpBatchIdTwice = "mcp_batch_id_twice" [];
    McpBatchUnreadable = "mcp_batch_unreadable" [];
    McpLost = "mcp_lost" ["upstream", "why"];
    McpUnsent = "mcp_unsent" ["upstream"];
    McpHttpRefused = "mcp_http_refused" ["upstream", "status", "said", "session"];
    McpHttpSessionEnded = "mcp_http_session_ended" [];
    McpServerExited = "mcp_server_exited" [];
    ToolTimedOut = "tool_timed_out" [];
    Replayed = "replayed" ["tool", "when", "key"];
    ReplayedFailure = "replayed_failure" ["tool", "when", "key"];
    RepeatHint = "repeat_hint" ["tool", "repeat", "next"];
    RepeatOff = "repeat_off" [];
    RepeatLimit = "repeat_limit" ["repeat", "max"];
    TimeUnrecorded = "time_unrecorded" [];
    RepeatDescription = "repeat_description" [];
    RepeatInvalid = "repeat_invalid" ["repeat", "max", "got", "tool"];
}

impl Text {
    /// The template named `name` in the file, for an implementation that names it as a string.
    pub fn named(name: &str) -> Option<Text> {
        Text::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// The text with `values` (name, value) in place of its placeholders: one value for each,
    /// and none for a name it does not have (checked in debug builds; the tests run them).
    pub fn fill(self, values: &[(&str, &str)]) -> String {
        debug_assert!(
            self.fits(values),
            "the text {} takes the values {:?}, not {:?}",
            self.name(),
            self.placeholders(),
            values.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        let template = TEXTS.get(self.name()).map_or("", String::as_str);
        fill(template, values)
    }

    /// Whether `values` names each placeholder once, and nothing else.
    pub fn fits(self, values: &[(&str, &str)]) -> bool {
        let wanted = self.placeholders();
        values.len() == wanted.len() && wanted.iter().all(|p| values.iter().any(|(n, _)| n == p))
    }
}

/// `template` with each `{name}` that `values` names replaced, in one pass; other braces stay.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((v, close)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;

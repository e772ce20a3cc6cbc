//! The conformance scenarios known to fail through one of toolonce's shapes while they pass
//! against the reference server directly (`mcp_conformance.rs` compares the runs), kept apart
//! from the runner so that the list and its reasons read on their own.

use super::{Revision, Shape};

/// Scenarios known to fail through one shape while they pass directly, each group with why. The
/// test fails when one of them passes (remove it then), as it does for any other difference.
///
/// These are gateway defects found by the 2026-07-28 run and not fixed yet (issue 22 item 11):
pub(crate) const KNOWN_GAPS: &[(Revision, Shape, &[&str], &str)] = &[
    (
        Revision::Y2026,
        Shape::Listen,
        &[
            "server-stateless",
            "completion-complete",
            "tools-list",
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-error",
            "tools-call-with-progress",
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
            "caching",
            "input-required-result-basic-elicitation",
            "input-required-result-basic-sampling",
            "input-required-result-basic-list-roots",
            "input-required-result-request-state",
            "input-required-result-multiple-input-requests",
            "input-required-result-multi-round",
            "input-required-result-missing-input-response",
            "input-required-result-non-tool-request",
            "input-required-result-result-type",
            "input-required-result-unsupported-methods",
            "input-required-result-tampered-state",
            "input-required-result-capability-check",
            "input-required-result-ignore-extra-params",
            "input-required-result-validate-input",
        ],
        "the gateway forwards a request without a session whose _meta lacks the protocol version \
         (server-stateless sends such probes first) to the one stdio server all 2026-07-28 \
         requests share; the SDK's stdio entry takes its first message's era for the whole \
         connection, so that server answers 2025-style from then on (no resultType, no \
         server/discover, no multi-round results). Directly, each HTTP request is classified \
         on its own and the probe is refused with -32602 and HTTP 400",
    ),
    (
        Revision::Y2026,
        Shape::ListenUpstream,
        &["server-stateless"],
        "the gateway answers HTTP 200 where the server answers a 2026-07-28 refusal with HTTP \
         400 or 404 (missing _meta, header mismatch, unsupported version, removed methods), \
         turns the server's own error code into -32600 (its HTTP client's code for a 4xx), \
         and subscriptions/listen streams do not reach the client",
    ),
];

//! What an entry says it is ([`About`]): the scope, tool and detail the claim that created it
//! recorded, so an operator looking at a stuck or `unknown` entry can tell what it was. Kept
//! apart from the contract, which it needs nothing of.

/// What an entry says it is: recorded by the claim that creates it, so an operator looking at
/// a stuck or `unknown` entry can tell what it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct About {
    /// The scope the key was derived in (a run, a session, a user).
    pub scope: Option<String>,
    /// The tool's name (for `toolonce exec`, the operation's name).
    pub tool: Option<String>,
    /// Anything else that identifies the operation for a person: `exec`'s command line, the
    /// MCP proxy's server identity.
    pub detail: Option<String>,
}

impl About {
    /// An entry's scope and tool.
    pub fn new(scope: impl Into<String>, tool: impl Into<String>) -> Self {
        About {
            scope: Some(scope.into()),
            tool: Some(tool.into()),
            detail: None,
        }
    }

    /// Nothing recorded (what an older writer leaves).
    pub fn empty() -> Self {
        Self::default()
    }

    /// Sets the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Sets or clears the scope.
    pub fn with_scope(mut self, scope: Option<String>) -> Self {
        self.scope = scope;
        self
    }

    /// Sets or clears the tool.
    pub fn with_tool(mut self, tool: Option<String>) -> Self {
        self.tool = tool;
        self
    }

    /// Sets or clears the detail.
    pub fn with_detail(mut self, detail: Option<String>) -> Self {
        self.detail = detail;
        self
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.scope.is_none() && self.tool.is_none() && self.detail.is_none()
    }
}

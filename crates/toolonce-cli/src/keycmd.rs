//! `toolonce key`: the operation key, canonical arguments and fingerprint of a call, for
//! debugging and for checking another implementation against this one. Touches no store.

use std::process::ExitCode;

use serde_json::json;
use toolonce::canonical::{self, DEFAULT_MAX_DEPTH};
use toolonce::key;

use crate::args;
use crate::output::outln;

#[derive(clap::Args)]
pub(crate) struct KeyArgs {
    /// The scope of the key (by default an agent uses its run id).
    #[arg(long)]
    scope: String,
    /// The tool name (`exec` calls it --name; both spellings work here).
    #[arg(long, visible_alias = "name")]
    tool: String,
    /// The arguments as JSON, or `-` to read them from standard input.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    args: String,
    /// A JSON Pointer (RFC 6901) to an argument field that alone defines the operation;
    /// repeat for several. The key then covers only these fields.
    #[arg(long = "key-field", value_name = "PTR")]
    key_fields: Vec<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(a: KeyArgs) -> anyhow::Result<ExitCode> {
    let value = args::read_args(&a.args)?;
    let fields = args::key_fields(&a.key_fields)?;
    let derived = key::derive(&a.scope, &a.tool, &value, fields.as_ref())?;
    let canonical = canonical::canonicalize(&value)?;
    let key_object = fields.as_ref().map(|f| f.project(&value));
    if a.json {
        let doc = json!({
            "scope": a.scope,
            "tool": a.tool,
            "key": derived.key,
            "canonical": canonical,
            "fingerprint": derived.fingerprint,
            "key_fields": a.key_fields,
            "key_object": key_object,
        });
        outln!("{doc}");
    } else {
        outln!("key          {}", derived.key);
        outln!("canonical    {canonical}");
        outln!("fingerprint  {}", derived.fingerprint);
        if let Some(object) = key_object {
            // The projection wraps each value one level deeper, as `key::derive` allows for.
            let mut text = String::new();
            canonical::canonicalize_into(&object, DEFAULT_MAX_DEPTH + 1, &mut text)?;
            outln!("key fields   {}", a.key_fields.join(" "));
            outln!("key object   {text}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

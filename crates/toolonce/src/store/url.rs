//! Store URLs as text: [`redact_url`], the one function every message, log line and `Debug`
//! output goes through before it shows a URL, and the small parsers the backends share for the
//! options they take out of a URL before handing the rest to their driver.

/// The URL with its secrets replaced by `***`, for messages, logs and `Debug` output.
///
/// - The password of the userinfo: `redis://user:s3cret@host` shows as `redis://user:***@host`,
///   `redis://:s3cret@host` as `redis://:***@host`.
/// - A userinfo without a password is a user name for PostgreSQL and is kept; for any other
///   scheme (where `redis://TOKEN@host` is a common way to write a password) it is masked.
/// - `password` and `sslpassword` in a query string, and in PostgreSQL's key/value form
///   (`host=db password='s3cret'`).
///
/// When the text is ambiguous (an `@` that may end a password containing a raw `/`), more is
/// masked rather than less. `sqlite://` and `memory://` URLs name no secret and are returned
/// unchanged.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return redact_key_values(url);
    };
    if matches!(scheme, "sqlite" | "memory") {
        return url.to_owned();
    }
    // The userinfo ends at the last `@` of the authority. A password with a raw `/` or `#`
    // puts that `@` after the authority's end, and one with a raw `?` puts it in what looks
    // like a first query option without `=`: those count too.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let query_start = rest.find('?').unwrap_or(rest.len());
    let first_option = &rest[query_start
        ..rest.len().min(
            query_start
                + rest[query_start..]
                    .find('&')
                    .unwrap_or(rest.len() - query_start),
        )];
    let at = rest[..authority_end]
        .rfind('@')
        .or_else(|| rest[..query_start].rfind('@'))
        .or_else(|| {
            // `?cr=3t@h` right after the host (no `/`) may be a password's tail too.
            (!first_option.contains('=') || authority_end == query_start)
                .then(|| first_option.rfind('@').map(|i| query_start + i))
                .flatten()
        });
    let (userinfo, after) = match at {
        Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
        None => (None, rest),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    out.push_str("://");
    if let Some(userinfo) = userinfo {
        match userinfo.split_once(':') {
            Some((user, _password)) => {
                out.push_str(user);
                out.push_str(":***");
            }
            None if scheme.starts_with("postgres") => out.push_str(userinfo),
            None => out.push_str("***"),
        }
        out.push('@');
    }
    match after.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let (query, fragment) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if is_secret_key(key) => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
            if let Some(fragment) = fragment {
                out.push('#');
                out.push_str(fragment);
            }
        }
        None => out.push_str(after),
    }
    out
}

fn is_secret_key(key: &str) -> bool {
    matches!(
        percent_decode(key).as_deref(),
        Some("password" | "sslpassword")
    )
}

/// Text without a scheme: PostgreSQL's key/value form, or something malformed.
fn redact_key_values(text: &str) -> String {
    match key_values(text) {
        Some(pairs) => {
            let mut out = String::with_capacity(text.len());
            let mut copied = 0;
            for pair in pairs.iter().filter(|p| is_secret_key(&p.key)) {
                out.push_str(&text[copied..pair.value_span.0]);
                out.push_str("***");
                copied = pair.value_span.1;
            }
            out.push_str(&text[copied..]);
            out
        }
        // Not even key/value text: whatever precedes an `@` may be credentials, and whatever
        // follows a `password` may be one.
        None => {
            let text = match text.rfind('@') {
                Some(i) => format!("***{}", &text[i..]),
                None => text.to_owned(),
            };
            match text.to_ascii_lowercase().find("password") {
                Some(i) => format!("{}***", &text[..i]),
                None => text,
            }
        }
    }
}

/// One `key=value` of a libpq key/value connection string.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct KeyValue {
    pub(crate) key: String,
    /// The value with its quotes and escapes removed.
    pub(crate) value: String,
    /// Where the whole pair starts and ends in the text (for taking it out).
    pub(crate) span: (usize, usize),
    /// Where the value as written (quotes included) starts and ends.
    pub(crate) value_span: (usize, usize),
}

/// Splits libpq's key/value form (`host=db port=5432 password='a b\'c'`) into its pairs;
/// `None` if the text is not in that form.
pub(crate) fn key_values(text: &str) -> Option<Vec<KeyValue>> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut pairs = Vec::new();
    let skip_ws = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        if i == bytes.len() {
            break;
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = &text[start..i];
        if key.is_empty() {
            return None;
        }
        i = skip_ws(i);
        if bytes.get(i) != Some(&b'=') {
            return None;
        }
        i = skip_ws(i + 1);
        let value_start = i;
        let mut value = Vec::new();
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match bytes.get(i)? {
                    b'\\' => {
                        value.push(*bytes.get(i + 1)?);
                        i += 2;
                    }
                    b'\'' => {
                        i += 1;
                        break;
                    }
                    b => {
                        value.push(*b);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' {
                    value.push(*bytes.get(i + 1)?);
                    i += 2;
                } else {
                    value.push(bytes[i]);
                    i += 1;
                }
            }
        }
        pairs.push(KeyValue {
            key: key.to_owned(),
            value: String::from_utf8(value).ok()?,
            span: (start, i),
            value_span: (value_start, i),
        });
    }
    Some(pairs)
}

/// Decodes `%XX` escapes (RFC 3986). A `+` is a literal plus, never a space: that is HTML
/// forms' rule, not URLs', and JavaScript's `decodeURIComponent` keeps it too, so a TypeScript
/// worker and this crate given one `?prefix=a+b` use one prefix (they used two, and never saw
/// each other's entries). `None` for a bad escape or text that is not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The refusal of a store URL option that nothing reads: it names the option, the options
/// that exist and, when one is a near miss (`allow_evicton`), that one. An option nobody reads
/// would otherwise be accepted and mean nothing, and whoever wrote it would believe it set.
pub(crate) fn unknown_option(store: &str, option: &str, known: &[&str]) -> crate::Error {
    let near = known
        .iter()
        .map(|k| (edit_distance(option, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min_by_key(|(d, _)| *d);
    let suggestion = match near {
        Some((_, k)) => format!(" (did you mean `{k}`?)"),
        None => String::new(),
    };
    let shown: String = option.chars().take(64).collect();
    crate::Error::Config(format!(
        "the {store} store URL has an option `{shown}` that nothing reads{suggestion}: the \
         options are {}",
        known
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The Damerau-Levenshtein distance (adjacent swaps count one) between two short names.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len() > 128 || b.len() > 128 {
        return usize::MAX;
    }
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// Parses a boolean URL option: `true`/`false`, `1`/`0`, `yes`/`no`, `on`/`off`.
#[cfg(feature = "redis")]
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_the_userinfo_are_masked_and_users_kept() {
        let cases = [
            ("redis://:s3cret@h:6379/0", "redis://:***@h:6379/0"),
            ("redis://app:s3cret@h:6379/", "redis://app:***@h:6379/"),
            ("rediss://default:s3cret@h", "rediss://default:***@h"),
            (
                "redis+cluster://:s3cret@h1:7000,h2:7001/?prefix=a%3A",
                "redis+cluster://:***@h1:7000,h2:7001/?prefix=a%3A",
            ),
            (
                "postgres://postgres:s3cret@127.0.0.1:5432/db?sslmode=require",
                "postgres://postgres:***@127.0.0.1:5432/db?sslmode=require",
            ),
            ("postgres://app@db/x", "postgres://app@db/x"),
            ("redis://s3cret@h:6379", "redis://***@h:6379"),
            ("redis://h:6379/?prefix=me@x", "redis://h:6379/?prefix=me@x"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_password_with_raw_separators_is_masked_whole() {
        for url in [
            "redis://:s3/cr3t@h:6379",
            "redis://u:s3:cr@t@h:6379",
            "postgres://u:a#s3cret@h/db",
            "redis://:s3?cr3t@h:6379",
            "redis://u:s3?cr=3t@h:6379",
        ] {
            let shown = redact_url(url);
            assert!(
                !shown.contains("s3") && !shown.contains("cr3t"),
                "{url} -> {shown}"
            );
            assert!(
                shown.ends_with("h:6379") || shown.ends_with("h/db"),
                "{shown}"
            );
        }
    }

    #[test]
    fn password_options_in_a_query_or_key_value_text_are_masked() {
        assert_eq!(
            redact_url("postgres://u@h/db?password=s3cret&sslmode=require"),
            "postgres://u@h/db?password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("host=h user=u password='s3 cret' dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
        assert_eq!(
            redact_url("host=h password = s3cret"),
            "host=h password = ***"
        );
        let shown = redact_url("u:s3cret@h");
        assert!(!shown.contains("s3cret"), "{shown}");
        let shown = redact_url("host=h 'x password=s3cret");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn an_unknown_option_is_named_with_the_known_ones_and_a_near_miss() {
        let known = ["prefix", "allow_eviction", "replicas", "replica_timeout_ms"];
        let m = unknown_option("Redis", "allow_evicton", &known).to_string();
        assert!(m.contains("`allow_evicton`"), "{m}");
        assert!(m.contains("did you mean `allow_eviction`?"), "{m}");
        assert!(m.contains("`replica_timeout_ms`"), "{m}");
        let m = unknown_option("Redis", "replcias", &known).to_string();
        assert!(m.contains("did you mean `replicas`?"), "{m}");
        let m = unknown_option("Redis", "colour", &known).to_string();
        assert!(!m.contains("did you mean"), "{m}");
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("ab", "ba"), 1);
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for url in [
            "sqlite://toolonce.db",
            "sqlite:///var/a@b.db",
            "memory://",
            "redis://127.0.0.1:6379/",
            "postgres://h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn key_value_text_splits_with_quotes_and_escapes() {
        let pairs = key_values(r"host=h  sslmode = require password='a b\'c' x=y\ z").unwrap();
        let got: Vec<(&str, &str)> = pairs
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("host", "h"),
                ("sslmode", "require"),
                ("password", "a b'c"),
                ("x", "y z")
            ]
        );
        assert!(key_values("host").is_none());
        assert!(key_values("password='open").is_none());
    }
}

//! The options a PostgreSQL store URL may carry, and the refusal of one the driver does not
//! know, naming the ones that exist (the driver's own words name neither).

use crate::Error;

/// The options a PostgreSQL store URL may carry: the driver's, and `sslrootcert` (toolonce's,
/// with libpq's meaning).
const OPTIONS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslrootcert",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// The driver's refusal of a connection string, as [`Error::Config`]; an option it does not
/// know is named with the ones that exist (the driver's own words name neither).
pub(super) fn config_refusal(e: deadpool_postgres::tokio_postgres::Error) -> Error {
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        if let Some(option) = cause
            .to_string()
            .strip_prefix("unknown option `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            return crate::store::url::unknown_option("PostgreSQL", option, OPTIONS);
        }
        source = cause.source();
    }
    Error::Config(format!(
        "invalid PostgreSQL URL: {}",
        crate::error::error_report(&e)
    ))
}

//! A plain client of a PostgreSQL server for the kit's own statements.

use anyhow::{Context, Result};

/// A client of the PostgreSQL server at `url` (a `pgbouncer=true` in it,
/// the server's own parameter, is left out: each statement the kit sends
/// is one simple query, which a pooler passes as it is).
pub(crate) async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let plain = without_pgbouncer(url);
    let (client, connection) = tokio_postgres::connect(&plain, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// `url` without its `pgbouncer` parameter, which tokio-postgres does not
/// know.
fn without_pgbouncer(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.starts_with("pgbouncer="))
        .collect();
    match kept.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", kept.join("&")),
    }
}

//! The engine's own statements, and what runs them whatever the driver
//! ([`Exec`]: a tokio-postgres client or transaction, or a sqlx
//! connection). The protocol is written once, against these: its
//! parameters are the engine's [`Arg`]s and its rows [`Row`]s, each driver
//! binding and reading them natively.

use super::error::{classify, DbError};
use super::value::{Arg, Kind, Row, ToArg};
use crate::backend::{Backend, BoxFuture, Operation, RunContext};
use crate::record::PhaseEnd;
use crate::store::{Result, StoreError};

/// What runs the engine's statements, one round trip each. Sealed: the
/// drivers are this crate's.
pub(crate) trait Exec: Send + Sync {
    /// Runs `sql`; its rows.
    fn rows<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, std::result::Result<Vec<Row>, DbError>>;

    /// Runs `sql`; how many rows it changed.
    fn changed<'a>(
        &'a self,
        sql: &'a str,
        args: Vec<Arg<'a>>,
    ) -> BoxFuture<'a, std::result::Result<u64, DbError>>;

    /// Runs statements with no parameters (settings, DDL), as one.
    fn batch<'a>(&'a self, sql: &'a str) -> BoxFuture<'a, std::result::Result<(), DbError>>;
}

/// A PostgreSQL driver as the protocol uses it: its transaction (an
/// [`Exec`]), and how an operation of its backend runs in one.
pub(crate) trait Driver: Backend {
    /// A transaction with the engine's settings.
    type Tx<'c>: Exec;

    /// Runs `operation`'s phase in `tx`.
    fn run<'a>(
        operation: &'a dyn Operation<Self>,
        tx: &'a Self::Tx<'_>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>>;
}

/// A statement of the engine and the types of its parameters (`$1`, `$2`,
/// … in order).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statement {
    text: &'static str,
    kinds: &'static [Kind],
}

impl Statement {
    /// `text` whose parameters are of `kinds`, in order.
    pub(crate) const fn new(text: &'static str, kinds: &'static [Kind]) -> Self {
        Self { text, kinds }
    }

    /// The statement's text.
    pub(crate) fn text(&self) -> &'static str {
        self.text
    }

    /// Runs it; its rows, errors unsorted.
    pub(crate) async fn rows(
        &self,
        client: &impl Exec,
        params: &[&dyn ToArg],
    ) -> std::result::Result<Vec<Row>, DbError> {
        client.rows(self.text, self.args(params)).await
    }

    /// Runs it; its rows, errors sorted by [`classify`].
    pub(crate) async fn query(
        &self,
        client: &impl Exec,
        params: &[&dyn ToArg],
    ) -> Result<Vec<Row>> {
        self.rows(client, params).await.map_err(classify)
    }

    /// Runs it; its one row, if any (more than one is an error).
    pub(crate) async fn query_opt(
        &self,
        client: &impl Exec,
        params: &[&dyn ToArg],
    ) -> Result<Option<Row>> {
        at_most_one(self.query(client, params).await?, self.text)
    }

    /// Runs it; its one row (none, or more, is an error).
    pub(crate) async fn query_one(&self, client: &impl Exec, params: &[&dyn ToArg]) -> Result<Row> {
        self.one(client, params).await.map_err(classify)
    }

    /// Runs it; its one row, errors unsorted.
    pub(crate) async fn one(
        &self,
        client: &impl Exec,
        params: &[&dyn ToArg],
    ) -> std::result::Result<Row, DbError> {
        let mut rows = self.rows(client, params).await?;
        match rows.len() {
            1 => Ok(rows.pop().expect("one row")),
            n => Err(DbError::Value(format!(
                "{n} rows where one was expected: {}",
                self.text
            ))),
        }
    }

    /// Runs it; how many rows it changed.
    pub(crate) async fn execute(&self, client: &impl Exec, params: &[&dyn ToArg]) -> Result<u64> {
        self.changed(client, params).await.map_err(classify)
    }

    /// Runs it; how many rows it changed, errors unsorted.
    pub(crate) async fn changed(
        &self,
        client: &impl Exec,
        params: &[&dyn ToArg],
    ) -> std::result::Result<u64, DbError> {
        client.changed(self.text, self.args(params)).await
    }

    fn args<'a>(&self, params: &[&'a dyn ToArg]) -> Vec<Arg<'a>> {
        let args: Vec<Arg<'a>> = params.iter().map(|&param| param.arg()).collect();
        debug_assert_eq!(
            args.iter().map(Arg::kind).collect::<Vec<_>>(),
            self.kinds,
            "one value of its type per parameter of {:?}",
            self.text
        );
        args
    }
}

/// Runs `sql` (made at run time) on `client`; its one row (none, or more,
/// is an error).
pub(crate) async fn one_row(
    client: &impl Exec,
    sql: &str,
    args: Vec<Arg<'_>>,
) -> std::result::Result<Row, DbError> {
    let mut rows = client.rows(sql, args).await?;
    match rows.len() {
        1 => Ok(rows.pop().expect("one row")),
        n => Err(DbError::Value(format!(
            "{n} rows where one was expected: {sql}"
        ))),
    }
}

/// The one row of `rows`, if any; more than one is an error (of `sql`).
pub(crate) fn at_most_one<R>(mut rows: Vec<R>, sql: &str) -> Result<Option<R>> {
    match rows.len() {
        0 | 1 => Ok(rows.pop()),
        n => Err(StoreError::internal(format!(
            "{n} rows where at most one was expected: {sql}"
        ))),
    }
}

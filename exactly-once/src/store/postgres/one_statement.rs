//! The one-statement first phase: an operation whose answer is known
//! before the database is touched and whose change cannot be refused (a
//! row and its answer, made before the database is touched) runs as part of its key's claim, in a single
//! statement that commits on its own. Requests that arrive together share
//! one such statement, a row each ([`super::batch`]): PostgreSQL's cost is
//! per statement and per commit far more than per row.

use crate::record::StoredResponse;
use std::sync::OnceLock;
use tokio_postgres::types::Type;

/// Most requests in one statement. A statement's rows are written one
/// after another by one backend, and each of its requests waits for the
/// last: with [`super::batch`]'s four statements at once, 8 rows keep 32
/// requests in flight over four backends instead of one. Measured on 2
/// cores against the minimal idempotent floor, 2 M records, 32 connections
/// (docs/BENCHMARKS.md, "Issue 28's tail is the statement"): with one
/// other busy process on the machine, p99 a median 1.11× the floor's
/// against 64 rows' 1.54×, and 1.11× its new keys a second against 0.95×.
/// On an idle machine the two are alike on 2 M records; on a fresh
/// database 8 rows were ahead.
pub(super) const MAX_ROWS: usize = 8;

/// The claim's own columns of each row, with their SQL types (and those of
/// the arrays that carry them): the row's number in the statement, then
/// the key's record as it will be stored.
pub(super) const CLAIM_COLUMNS: [(&str, &str, Type); 7] = [
    ("n", "int4", Type::INT4_ARRAY),
    ("caller", "bytea", Type::BYTEA_ARRAY),
    ("key", "text", Type::TEXT_ARRAY),
    ("fingerprint", "bytea", Type::BYTEA_ARRAY),
    ("status", "int2", Type::INT2_ARRAY),
    ("headers", "text", Type::TEXT_ARRAY),
    ("body", "bytea", Type::BYTEA_ARRAY),
];

/// One table a one-statement first phase writes a row into, said by name:
/// the columns the operation gives values for (with their SQL types; the
/// values travel as text and are cast), the column that takes the key's
/// caller, those set to the statement's `now()`, and whether the row is
/// written only when one of its values is there (an optional row: a
/// receipt) or skipped when it already exists.
///
/// ```
/// use exactly_once::postgres::{Insert, Shape};
///
/// static NOTE: Shape = Shape::inserts(&[
///     Insert::into("notes", &[("id", "text"), ("text", "text")]).caller("caller"),
///     Insert::into("outbox", &[("message_id", "text"), ("body", "text")])
///         .now(&["next_attempt_at"])
///         .only_with("message_id")
///         .ignoring_conflicts_on("message_id"),
/// ]);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Insert {
    table: &'static str,
    columns: &'static [(&'static str, &'static str)],
    caller: Option<&'static str>,
    now: &'static [&'static str],
    only_with: Option<&'static str>,
    unique: Option<&'static str>,
}

impl Insert {
    /// A row of `table` with `columns` (name, SQL type), in the order the
    /// statement lists them.
    pub const fn into(
        table: &'static str,
        columns: &'static [(&'static str, &'static str)],
    ) -> Self {
        Self {
            table,
            columns,
            caller: None,
            now: &[],
            only_with: None,
            unique: None,
        }
    }

    /// `column` takes the key's caller (`bytea`, the hash every keyed row
    /// carries).
    pub const fn caller(mut self, column: &'static str) -> Self {
        self.caller = Some(column);
        self
    }

    /// `columns` take the statement's `now()`.
    pub const fn now(mut self, columns: &'static [&'static str]) -> Self {
        self.now = columns;
        self
    }

    /// The row is written only when `column` has a value (an optional
    /// row, such as a receipt only some requests ask for).
    pub const fn only_with(mut self, column: &'static str) -> Self {
        self.only_with = Some(column);
        self
    }

    /// A row whose `column` is already there is left as it is (`ON
    /// CONFLICT (column) DO NOTHING`).
    pub const fn ignoring_conflicts_on(mut self, column: &'static str) -> Self {
        self.unique = Some(column);
        self
    }
}

/// What an operation adds to its key's claim: the rows it writes, known
/// before the database is touched. Said as [`Insert`]s
/// ([`Shape::inserts`]), or, for a write an insert cannot say, as SQL
/// ([`Shape::new`]). Either way the engine claims the key and writes the
/// rows in one statement shared by many requests, and writes nothing for a
/// key another request holds.
pub struct Shape {
    writes: Writes,
    /// The statement's text, written once.
    text: OnceLock<String>,
}

enum Writes {
    /// Columns named `c1`, `c2`, … in each row (given by SQL type) and the
    /// CTEs that write them, each `name AS (INSERT … SELECT … FROM claimed
    /// …)`; `claimed` holds the rows whose key was claimed (`caller`,
    /// `key`, `c1`, …, each column of its type).
    Sql {
        columns: &'static [&'static str],
        ctes: &'static [&'static str],
    },
    Inserts(&'static [Insert]),
}

impl Shape {
    /// A shape of rows said by name: see [`Insert`]. Its requests give
    /// their values with [`Shape::row`].
    pub const fn inserts(inserts: &'static [Insert]) -> Self {
        Self {
            writes: Writes::Inserts(inserts),
            text: OnceLock::new(),
        }
    }

    /// A shape with `columns` (SQL types; the values are named `c1`, `c2`,
    /// … in the statement) written by `ctes`, each `name AS (INSERT …
    /// SELECT … FROM claimed …)`; `claimed` holds the rows whose key was
    /// claimed (`caller`, `key`, `c1`, …). For writes [`Shape::inserts`]
    /// cannot say; its requests give their values with [`Shape::with`].
    pub const fn new(columns: &'static [&'static str], ctes: &'static [&'static str]) -> Self {
        Self {
            writes: Writes::Sql { columns, ctes },
            text: OnceLock::new(),
        }
    }

    /// The SQL types of the values a request gives, in order.
    fn column_types(&self) -> Vec<&'static str> {
        match &self.writes {
            Writes::Sql { columns, .. } => columns.to_vec(),
            Writes::Inserts(inserts) => inserts
                .iter()
                .flat_map(|insert| insert.columns.iter().map(|(_, ty)| *ty))
                .collect(),
        }
    }

    /// How many values a request gives.
    fn column_count(&self) -> usize {
        match &self.writes {
            Writes::Sql { columns, .. } => columns.len(),
            Writes::Inserts(inserts) => inserts.iter().map(|insert| insert.columns.len()).sum(),
        }
    }

    /// An operation of this shape, with its columns' values (as text,
    /// `None` for NULL, one per column, in order) and the answer it
    /// records.
    pub fn with(
        &'static self,
        params: Vec<Option<String>>,
        response: StoredResponse,
    ) -> OneStatement {
        assert_eq!(params.len(), self.column_count(), "one value per column");
        OneStatement {
            shape: self,
            params,
            response,
        }
    }

    /// The values of one request of a shape said by [`Insert`]s, set by
    /// column name ([`Values::set`]); those not set are NULL.
    pub fn row(&'static self) -> Values {
        Values {
            shape: self,
            params: vec![None; self.column_count()],
        }
    }

    /// The index of `name` among the values: `column`, or `table.column`
    /// when two tables have one of that name.
    fn index_of(&self, name: &str) -> Option<usize> {
        let Writes::Inserts(inserts) = &self.writes else {
            return None;
        };
        let (table, column) = match name.split_once('.') {
            Some((table, column)) => (Some(table), column),
            None => (None, name),
        };
        let mut found = None;
        let mut index = 0;
        for insert in inserts.iter() {
            for (each, _) in insert.columns {
                if *each == column && table.is_none_or(|t| t == insert.table) {
                    assert!(
                        found.is_none(),
                        "two tables have a column {column:?}: say which, as \"table.{column}\""
                    );
                    found = Some(index);
                }
                index += 1;
            }
        }
        found
    }

    /// The statement, for any number of rows: `$1` is the TTL in seconds,
    /// then one array per column ([`CLAIM_COLUMNS`], then the operation's
    /// as text), a row being the same index in every array. One text per
    /// shape, so each connection prepares it once whatever the number of
    /// rows. The claim also records the (already known) answer: a
    /// finished, expired record (or its tombstone) counts as absent and the
    /// claim replaces it, as the key's next generation;
    /// a live one is left alone (and its transaction, if still running,
    /// waited for). Rows are claimed in key order, so two statements that
    /// share keys take their locks in the same order and never deadlock.
    /// It returns the numbers of the rows claimed.
    pub(super) fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let claim = CLAIM_COLUMNS
                .iter()
                .map(|(name, ty, _)| (name.to_string(), *ty));
            let types = self.column_types();
            let own = (1..=types.len()).map(|i| (format!("c{i}"), "text"));
            let (names, arrays): (Vec<String>, Vec<String>) = claim
                .chain(own)
                .enumerate()
                .map(|(i, (name, ty))| (name, format!("${}::{ty}[]", i + 2)))
                .unzip();
            let typed: Vec<String> = types
                .iter()
                .enumerate()
                .map(|(i, ty)| format!("c{n}::{ty} AS c{n}", n = i + 1))
                .collect();
            format!(
                "WITH input AS (SELECT * FROM unnest({arrays}) AS input ({names})),
                 claim AS (INSERT INTO idempotency_keys
                     (caller, key, fingerprint, recovery_point, status, headers, body,
                      created_at, expires_at)
                   SELECT caller, key, fingerprint, 'finished', status, headers, body, now(),
                          now() + $1::float8 * interval '1 second'
                   FROM input ORDER BY caller, key
                   ON CONFLICT (caller, key) DO UPDATE
                     SET fingerprint = EXCLUDED.fingerprint, recovery_point = 'finished',
                         state = NULL, lease_token = NULL, leased_until = NULL,
                         status = EXCLUDED.status, headers = EXCLUDED.headers,
                         body = EXCLUDED.body, created_at = EXCLUDED.created_at,
                         expires_at = EXCLUDED.expires_at, attempts = 0, last_error = NULL,
                         attention = NULL, generation = idempotency_keys.generation + 1
                     WHERE (idempotency_keys.recovery_point = 'finished'
                            AND idempotency_keys.expires_at <= EXCLUDED.created_at)
                        OR idempotency_keys.recovery_point = 'expired'
                   RETURNING caller, key),
                 claimed AS (SELECT n, caller, key, {typed}
                             FROM input JOIN claim USING (caller, key)),
                 {ctes}
                 SELECT n FROM claimed",
                arrays = arrays.join(", "),
                names = names.join(", "),
                typed = typed.join(", "),
                ctes = self.ctes().join(", "),
            )
        })
    }
}

impl Shape {
    /// The CTEs that write the rows.
    fn ctes(&self) -> Vec<String> {
        let inserts = match &self.writes {
            Writes::Sql { ctes, .. } => return ctes.iter().map(|cte| cte.to_string()).collect(),
            Writes::Inserts(inserts) => inserts,
        };
        let mut next = 1;
        inserts
            .iter()
            .enumerate()
            .map(|(k, insert)| {
                let first = next;
                next += insert.columns.len();
                let value = |name: &str| {
                    let i = insert.columns.iter().position(|(c, _)| *c == name);
                    format!("c{}", first + i.expect("a column of the insert"))
                };
                let mut columns = Vec::new();
                let mut values = Vec::new();
                if let Some(caller) = insert.caller {
                    columns.push(caller.to_owned());
                    values.push("caller".to_owned());
                }
                for (i, (column, _)) in insert.columns.iter().enumerate() {
                    columns.push((*column).to_owned());
                    values.push(format!("c{}", first + i));
                }
                for column in insert.now {
                    columns.push((*column).to_owned());
                    values.push("now()".to_owned());
                }
                let only_with = insert
                    .only_with
                    .map(|column| format!(" WHERE {} IS NOT NULL", value(column)))
                    .unwrap_or_default();
                let unique = insert
                    .unique
                    .map(|column| format!(" ON CONFLICT ({column}) DO NOTHING"))
                    .unwrap_or_default();
                format!(
                    "w{k} AS (INSERT INTO {table} ({columns}) SELECT {values} FROM claimed{only_with}{unique})",
                    table = insert.table,
                    columns = columns.join(", "),
                    values = values.join(", "),
                )
            })
            .collect()
    }
}

/// The values of one request of a shape said by [`Insert`]s
/// ([`Shape::row`]).
pub struct Values {
    shape: &'static Shape,
    params: Vec<Option<String>>,
}

impl Values {
    /// The value of the column `name` (`column`, or `table.column` when
    /// two tables have one of that name), as text the statement casts to
    /// the column's type.
    ///
    /// # Panics
    ///
    /// When the shape has no such column: a mistake in the operation's
    /// code, which its first test shows.
    pub fn set(&mut self, name: &str, value: impl std::fmt::Display) -> &mut Self {
        let index = self
            .shape
            .index_of(name)
            .unwrap_or_else(|| panic!("the shape has no column {name:?}"));
        self.params[index] = Some(value.to_string());
        self
    }

    /// [`Values::set`], or NULL for `None`.
    pub fn set_optional(&mut self, name: &str, value: Option<impl std::fmt::Display>) -> &mut Self {
        match value {
            Some(value) => self.set(name, value),
            None => {
                assert!(
                    self.shape.index_of(name).is_some(),
                    "the shape has no column {name:?}"
                );
                self
            }
        }
    }

    /// The operation, recording `response` with its key.
    pub fn answer(self, response: StoredResponse) -> OneStatement {
        OneStatement {
            shape: self.shape,
            params: self.params,
            response,
        }
    }
}

/// An operation whose answer is known before the database is touched and
/// whose change cannot be refused (an insert of rows made in advance) runs as
/// part of its key's claim: one statement, one round trip, committed on its
/// own, shared with the requests that arrive with it.
pub struct OneStatement {
    /// The operation's columns and CTEs; requests of one shape share a
    /// statement.
    pub(super) shape: &'static Shape,
    /// The values of the shape's columns, in order, as text (`None`:
    /// NULL); the statement casts each to its column's type.
    pub(super) params: Vec<Option<String>>,
    /// The answer recorded with the key.
    pub(super) response: StoredResponse,
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    static NOTE: Shape = Shape::inserts(&[
        Insert::into("notes", &[("id", "text"), ("words", "bigint")]).caller("caller"),
        Insert::into("outbox", &[("message_id", "text"), ("body", "text")])
            .now(&["next_attempt_at"])
            .only_with("message_id")
            .ignoring_conflicts_on("message_id"),
    ]);

    static TWICE: Shape = Shape::inserts(&[
        Insert::into("a", &[("id", "text")]),
        Insert::into("b", &[("id", "text")]),
    ]);

    #[test]
    fn inserts_said_by_name_become_the_ctes_that_write_them() {
        assert_eq!(
            NOTE.ctes(),
            [
                "w0 AS (INSERT INTO notes (caller, id, words) SELECT caller, c1, c2 FROM claimed)",
                "w1 AS (INSERT INTO outbox (message_id, body, next_attempt_at) SELECT c3, c4, \
                 now() FROM claimed WHERE c3 IS NOT NULL ON CONFLICT (message_id) DO NOTHING)",
            ]
        );
        assert!(NOTE.text().contains("c2::bigint AS c2"));
        let response = StoredResponse::new(StatusCode::CREATED, "application/json", "{}");
        let mut row = NOTE.row();
        row.set("id", "n_1")
            .set("words", 3)
            .set_optional("message_id", None::<&str>);
        let one = row.answer(response);
        assert_eq!(
            one.params,
            [Some("n_1".into()), Some("3".into()), None, None]
        );
    }

    #[test]
    fn a_column_two_tables_share_is_named_with_its_table() {
        let mut row = TWICE.row();
        row.set("b.id", "x").set("a.id", "y");
        assert_eq!(row.params, [Some("y".into()), Some("x".into())]);
        let ambiguous = std::panic::catch_unwind(|| TWICE.row().set("id", "z").params.clone());
        assert!(ambiguous.is_err());
        let unknown = std::panic::catch_unwind(|| NOTE.row().set("nope", 1).params.clone());
        assert!(unknown.is_err());
    }
}

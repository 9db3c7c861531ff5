//! The values the engine's own statements bind and read, whichever the
//! driver: the engine binds only bytea, text, the integers, float8, bool
//! and text arrays ([`Arg`]), and reads the same ([`Column`]); each driver
//! encodes and decodes them natively (tokio-postgres's `ToSql`/`FromSql`,
//! sqlx's `Encode`/`Decode`).

use super::error::DbError;
use crate::Caller;

/// A statement parameter's SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Bytea,
    Text,
    Int2,
    Int4,
    Int8,
    Float8,
    Bool,
    TextArray,
}

/// One parameter's value (`None`: NULL), of its [`Kind`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Bytea(Option<&'a [u8]>),
    Text(Option<&'a str>),
    Int2(Option<i16>),
    Int4(Option<i32>),
    Int8(Option<i64>),
    Float8(Option<f64>),
    Bool(Option<bool>),
    TextArray(Option<&'a [String]>),
}

impl Arg<'_> {
    /// Its SQL type.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Self::Bytea(_) => Kind::Bytea,
            Self::Text(_) => Kind::Text,
            Self::Int2(_) => Kind::Int2,
            Self::Int4(_) => Kind::Int4,
            Self::Int8(_) => Kind::Int8,
            Self::Float8(_) => Kind::Float8,
            Self::Bool(_) => Kind::Bool,
            Self::TextArray(_) => Kind::TextArray,
        }
    }
}

/// A Rust value the engine binds as a statement parameter.
pub(crate) trait ToArg: Sync {
    /// Its value.
    fn arg(&self) -> Arg<'_>;

    /// NULL of its type.
    fn null() -> Arg<'static>
    where
        Self: Sized;
}

/// Unsized values: never NULL themselves (`Option<&str>` is).
macro_rules! to_arg_unsized {
    ($($ty:ty => $variant:ident($value:ident) $make:expr),* $(,)?) => {$(
        impl ToArg for $ty {
            fn arg(&self) -> Arg<'_> {
                let $value = self;
                Arg::$variant(Some($make))
            }
        }
    )*};
}

to_arg_unsized!(
    [u8] => Bytea(v) v,
    str => Text(v) v,
    [String] => TextArray(v) v,
);

macro_rules! to_arg {
    ($($ty:ty => $variant:ident($value:ident) $make:expr),* $(,)?) => {$(
        impl ToArg for $ty {
            fn arg(&self) -> Arg<'_> {
                let $value = self;
                Arg::$variant(Some($make))
            }

            fn null() -> Arg<'static> {
                Arg::$variant(None)
            }
        }
    )*};
}

to_arg!(
    Vec<u8> => Bytea(v) v.as_slice(),
    String => Text(v) v.as_str(),
    i16 => Int2(v) *v,
    i32 => Int4(v) *v,
    i64 => Int8(v) *v,
    f64 => Float8(v) *v,
    bool => Bool(v) *v,
    Vec<String> => TextArray(v) v.as_slice(),
    Caller => Bytea(v) &v.as_bytes()[..],
);

to_arg!(
    &str => Text(v) *v,
    &[u8] => Bytea(v) *v,
    &[String] => TextArray(v) *v,
);

impl<T: ToArg> ToArg for &T {
    fn arg(&self) -> Arg<'_> {
        (**self).arg()
    }

    fn null() -> Arg<'static> {
        T::null()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn arg(&self) -> Arg<'_> {
        match self {
            Some(value) => value.arg(),
            None => T::null(),
        }
    }

    fn null() -> Arg<'static> {
        T::null()
    }
}

/// A row of the engine's own statements, whichever driver brought it.
pub(crate) enum Row {
    /// From tokio-postgres.
    #[cfg(feature = "postgres")]
    Tokio(tokio_postgres::Row),
    /// From sqlx.
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::postgres::PgRow),
}

/// A column's position in a row.
pub(crate) trait ColumnIndex {
    /// The position.
    fn at(&self) -> usize;
}

impl ColumnIndex for usize {
    fn at(&self) -> usize {
        *self
    }
}

impl Row {
    /// Column `idx` as `T`; panics when it is not one (as both drivers'
    /// `get` do).
    pub(crate) fn get<'r, I: ColumnIndex, T: Column<'r>>(&'r self, idx: I) -> T {
        match self.try_get(idx.at()) {
            Ok(value) => value,
            Err(e) => panic!("error reading column {}: {e}", idx.at()),
        }
    }

    /// Column `idx` as `T`.
    pub(crate) fn try_get<'r, T: Column<'r>>(&'r self, idx: usize) -> Result<T, DbError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Tokio(row) => T::from_tokio(row, idx),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(row) => T::from_sqlx(row, idx),
        }
    }
}

impl std::fmt::Debug for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(feature = "postgres")]
            Self::Tokio(row) => row.fmt(f),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(_) => f.write_str("Row(sqlx)"),
        }
    }
}

/// A Rust value the engine reads from a column.
pub(crate) trait Column<'r>: Sized {
    /// From a tokio-postgres row.
    #[cfg(feature = "postgres")]
    fn from_tokio(row: &'r tokio_postgres::Row, idx: usize) -> Result<Self, DbError>;

    /// From a sqlx row.
    #[cfg(feature = "sqlx")]
    fn from_sqlx(row: &'r sqlx::postgres::PgRow, idx: usize) -> Result<Self, DbError>;
}

macro_rules! column {
    ($($ty:ty),* $(,)?) => {$(
        impl<'r> Column<'r> for $ty {
            #[cfg(feature = "postgres")]
            fn from_tokio(row: &'r tokio_postgres::Row, idx: usize) -> Result<Self, DbError> {
                Ok(row.try_get(idx)?)
            }

            #[cfg(feature = "sqlx")]
            fn from_sqlx(row: &'r sqlx::postgres::PgRow, idx: usize) -> Result<Self, DbError> {
                Ok(sqlx::Row::try_get(row, idx)?)
            }
        }
    )*};
}

column!(
    i16,
    i32,
    i64,
    f64,
    bool,
    String,
    &'r str,
    Vec<u8>,
    &'r [u8],
    Vec<String>,
    Option<i16>,
    Option<i32>,
    Option<i64>,
    Option<f64>,
    Option<bool>,
    Option<String>,
    Option<&'r str>,
    Option<Vec<u8>>,
    Option<&'r [u8]>,
);

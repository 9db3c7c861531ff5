//! A page of a caller's charges, and the paging rules both backends follow.

use crate::domain::{Caller, Charge, ChargeId};

/// One page of a caller's charges, newest first.
#[derive(Debug, Clone)]
pub struct ChargePage {
    /// The charges.
    pub data: Vec<Charge>,
    /// Whether older charges remain.
    pub has_more: bool,
}

/// Which page of a caller's charges to read: the paging rules both
/// backends follow.
#[derive(Debug, Clone, Copy)]
pub struct ChargeQuery<'a> {
    /// Whose charges.
    pub caller: &'a Caller,
    /// At most this many charges (1 to 1000).
    pub limit: u32,
    /// Only charges older than this one.
    pub starting_after: Option<&'a ChargeId>,
}

impl ChargeQuery<'_> {
    /// Ids are `ch_` + hex compared as bytes, so `"ch_~"` sorts after every
    /// id: the first page reads "ids below it".
    pub fn before(&self) -> &str {
        self.starting_after.map_or("ch_~", |id| id.as_ref())
    }

    /// Rows to ask for: one more than the page, to learn `has_more`.
    pub fn rows(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// The page of `rows`, newest first as read.
    pub fn page(&self, mut rows: Vec<Charge>) -> ChargePage {
        let has_more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        ChargePage {
            data: rows,
            has_more,
        }
    }
}

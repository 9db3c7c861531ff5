//! Where an application's tables live when its PostgreSQL database is a
//! Citus coordinator (the `citus` extension present in the database): a
//! migration that creates a table says how it is placed
//! ([`Migration::places`](super::schema::Migration::places)). On plain
//! PostgreSQL and SQLite placements mean nothing.

/// How one table is placed on Citus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The table's name.
    pub table: &'static str,
    /// How it is placed.
    pub kind: PlacementKind,
}

/// How a table is placed on Citus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementKind {
    /// Sharded by the caller's column (the bytes the engine keys its
    /// records by) and co-located with the engine's records: a caller's
    /// rows and its keys' records live in one shard, so an operation's
    /// transaction is one shard's. Its primary key and unique constraints
    /// must include the column.
    ByCaller {
        /// The column holding the caller.
        column: &'static str,
    },
    /// A copy on every node (a small table every caller reads, say a
    /// catalogue or a stock): a write to it commits on every node in two
    /// phases.
    Reference,
    /// Stays on the coordinator, in Citus's metadata (a Citus local
    /// table), so that an instance connected to a worker reaches it too. A
    /// transaction that writes it and a caller's shard on a worker commits
    /// on both in two phases. A table no placement names stays on the
    /// coordinator outside the metadata: only instances connected to the
    /// coordinator reach it.
    Local,
}

impl Placement {
    /// `table`, sharded by its caller column `column`, co-located with the
    /// engine's records.
    pub const fn by_caller(table: &'static str, column: &'static str) -> Self {
        Self {
            table,
            kind: PlacementKind::ByCaller { column },
        }
    }

    /// `table`, copied to every node.
    pub const fn reference(table: &'static str) -> Self {
        Self {
            table,
            kind: PlacementKind::Reference,
        }
    }

    /// `table`, on the coordinator, reachable from every node.
    pub const fn local(table: &'static str) -> Self {
        Self {
            table,
            kind: PlacementKind::Local,
        }
    }
}

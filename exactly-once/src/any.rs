//! [`Any`]: the backend an application picks at start-up, by URL: SQLite
//! or PostgreSQL, behind one [`Engine<Any>`](crate::Engine) type.
//!
//! Its operations are the types that implement both
//! [`Operation<Sqlite>`](crate::Operation) and `Operation<Postgres>`: they
//! get `Operation<Any>` from those, and a type that forgets one of the two
//! does not compile where an `Engine<Any>` runs it. [`AnyStore`] holds
//! whichever store was opened and hands each phase to it as that
//! backend's operation.

use crate::backend::{sealed, Backend, BoxFuture, Operation, RunContext};
use crate::caller::Caller;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::operation_id::OperationId;
use crate::record::{Lease, PhaseEnd, StoredResponse};
use crate::store::operator::{
    ActionRecord, Census, ListFilter, OperationRecord, OperatorTake, OutboxCensus, Settlement,
    Taken,
};
use crate::store::postgres::{OneStatement, Postgres, PostgresStore, Transaction};
use crate::store::sqlite::{Sqlite, SqliteStore};
use crate::store::{
    Abandoned, Advanced, AfterFailure, Delivery, Execution, FirstPhase, LiveRecord, OutboxItem,
    Result, Store, StoreError,
};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// SQLite or PostgreSQL, as the application chose at start-up
/// ([`AnyStore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Any;

impl sealed::Sealed for Any {}

impl Backend for Any {
    type Transaction<'t> = AnyTransaction<'t>;
    type RunOutput<'t> = AnyRunOutput<'t>;
    type OneStatement = OneStatement;
    const NAME: &'static str = "any";
}

/// What an `Operation<Any>` writes with: the chosen backend's own.
#[derive(Debug)]
pub enum AnyTransaction<'t> {
    /// The SQLite writer's connection.
    Sqlite(&'t rusqlite::Connection),
    /// The PostgreSQL transaction.
    Postgres(&'t Transaction<'t>),
}

/// What an `Operation<Any>`'s run returns: the chosen backend's own.
pub enum AnyRunOutput<'t> {
    /// SQLite's phase end, at once.
    Sqlite(rusqlite::Result<PhaseEnd>),
    /// PostgreSQL's, to await.
    Postgres(BoxFuture<'t, Result<PhaseEnd>>),
}

/// Every operation that runs on both backends runs on either.
impl<O> Operation<Any> for O
where
    O: Operation<Sqlite> + Operation<Postgres>,
{
    fn run<'a>(&'a self, tx: AnyTransaction<'a>, at: &'a RunContext<'a>) -> AnyRunOutput<'a> {
        match tx {
            AnyTransaction::Sqlite(conn) => {
                AnyRunOutput::Sqlite(Operation::<Sqlite>::run(self, conn, at))
            }
            AnyTransaction::Postgres(tx) => {
                AnyRunOutput::Postgres(Operation::<Postgres>::run(self, tx, at))
            }
        }
    }

    fn one_statement(&self) -> Option<OneStatement> {
        Operation::<Postgres>::one_statement(self)
    }

    /// The TTL its SQLite implementation gives, else its PostgreSQL one's.
    fn key_ttl(&self) -> Option<Duration> {
        Operation::<Sqlite>::key_ttl(self).or_else(|| Operation::<Postgres>::key_ttl(self))
    }
}

/// An `Operation<Any>` handed to the SQLite store.
#[derive(Debug)]
struct OnSqlite(Arc<dyn Operation<Any>>);

impl Operation<Sqlite> for OnSqlite {
    fn run(&self, conn: &rusqlite::Connection, at: &RunContext<'_>) -> rusqlite::Result<PhaseEnd> {
        match self.0.run(AnyTransaction::Sqlite(conn), at) {
            AnyRunOutput::Sqlite(ran) => ran,
            AnyRunOutput::Postgres(_) => Err(rusqlite::Error::ToSqlConversionFailure(
                format!(
                    "{:?} answered SQLite's connection with PostgreSQL's future",
                    self.0
                )
                .into(),
            )),
        }
    }

    fn key_ttl(&self) -> Option<Duration> {
        self.0.key_ttl()
    }
}

/// An `Operation<Any>` handed to the PostgreSQL store.
#[derive(Debug)]
struct OnPostgres(Arc<dyn Operation<Any>>);

impl Operation<Postgres> for OnPostgres {
    fn run<'a>(
        &'a self,
        tx: &'a Transaction<'a>,
        at: &'a RunContext<'a>,
    ) -> BoxFuture<'a, Result<PhaseEnd>> {
        match self.0.run(AnyTransaction::Postgres(tx), at) {
            AnyRunOutput::Postgres(ran) => ran,
            AnyRunOutput::Sqlite(_) => {
                let wrong = StoreError::internal(format!(
                    "{:?} answered PostgreSQL's transaction as on SQLite",
                    self.0
                ));
                Box::pin(std::future::ready(Err(wrong)))
            }
        }
    }

    fn one_statement(&self) -> Option<OneStatement> {
        self.0.one_statement()
    }

    fn key_ttl(&self) -> Option<Duration> {
        self.0.key_ttl()
    }
}

/// The store an [`Engine<Any>`](crate::Engine) runs on: whichever was
/// opened. Keep your own handle to it for your reads
/// ([`SqliteStore::read`], [`PostgresStore::pool`]).
#[derive(Clone)]
pub enum AnyStore {
    /// The embedded file.
    Sqlite(Arc<SqliteStore>),
    /// The server shared by many instances.
    Postgres(Arc<PostgresStore>),
}

impl From<Arc<SqliteStore>> for AnyStore {
    fn from(store: Arc<SqliteStore>) -> Self {
        Self::Sqlite(store)
    }
}

impl From<Arc<PostgresStore>> for AnyStore {
    fn from(store: Arc<PostgresStore>) -> Self {
        Self::Postgres(store)
    }
}

/// Calls the same method on whichever store it is.
macro_rules! either {
    ($self:ident . $method:ident ( $($arg:expr),* ) $(. $await:ident)?) => {
        match $self {
            AnyStore::Sqlite(store) => store.$method($($arg),*) $(.$await)?,
            AnyStore::Postgres(store) => store.$method($($arg),*) $(.$await)?,
        }
    };
}

#[async_trait]
impl Store<Any> for AnyStore {
    async fn lookup(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<LiveRecord>> {
        either!(self.lookup(caller, key).await)
    }

    async fn unfinished(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<Fingerprint>> {
        either!(self.unfinished(caller, key).await)
    }

    fn epoch(&self) -> u64 {
        either!(self.epoch())
    }

    fn key_ttl(&self) -> Duration {
        either!(self.key_ttl())
    }

    fn lease(&self) -> Duration {
        either!(self.lease())
    }

    async fn execute(&self, phase: FirstPhase<Any>) -> Result<Execution> {
        match self {
            Self::Sqlite(store) => {
                let phase = phase.on(|operation| Arc::new(OnSqlite(operation)));
                store.execute(phase).await
            }
            Self::Postgres(store) => {
                let phase = phase.on(|operation| Arc::new(OnPostgres(operation)));
                store.execute(phase).await
            }
        }
    }

    async fn advance(&self, lease: &Lease, phase: Arc<dyn Operation<Any>>) -> Result<Advanced> {
        match self {
            Self::Sqlite(store) => store.advance(lease, Arc::new(OnSqlite(phase))).await,
            Self::Postgres(store) => store.advance(lease, Arc::new(OnPostgres(phase))).await,
        }
    }

    async fn renew(&self, lease: &Lease, length: Duration) -> Result<bool> {
        either!(self.renew(lease, length).await)
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        either!(self.release(lease).await)
    }

    async fn step_failed(&self, lease: &Lease, error: &str) -> Result<AfterFailure> {
        either!(self.step_failed(lease, error).await)
    }

    async fn set_aside(&self, lease: &Lease, reason: &str) -> Result<bool> {
        either!(self.set_aside(lease, reason).await)
    }

    async fn needing_attention(&self) -> Result<u64> {
        either!(self.needing_attention().await)
    }

    async fn abandoned(&self, limit: u32, skip: &[String]) -> Result<Vec<Abandoned>> {
        either!(self.abandoned(limit, skip).await)
    }

    async fn take_over(&self, caller: &Caller, key: &IdempotencyKey) -> Result<Option<Lease>> {
        either!(self.take_over(caller, key).await)
    }

    async fn sweep(&self, limit: u32) -> Result<u64> {
        either!(self.sweep(limit).await)
    }

    async fn due_messages(&self, limit: u32, claim: Duration) -> Result<Vec<OutboxItem>> {
        either!(self.due_messages(limit, claim).await)
    }

    async fn message_settled(&self, item: &OutboxItem, delivery: Delivery<'_>) -> Result<bool> {
        either!(self.message_settled(item, delivery).await)
    }

    async fn messages_waiting(&self) -> Result<u64> {
        either!(self.messages_waiting().await)
    }

    async fn messages_dead(&self) -> Result<u64> {
        either!(self.messages_dead().await)
    }

    async fn health(&self) -> Result<()> {
        either!(self.health().await)
    }

    async fn operations(&self, filter: &ListFilter) -> Result<Vec<OperationRecord>> {
        either!(self.operations(filter).await)
    }

    async fn operation(
        &self,
        caller: &Caller,
        key: &IdempotencyKey,
    ) -> Result<Option<OperationRecord>> {
        either!(self.operation(caller, key).await)
    }

    async fn find_operations(&self, prefix: &[u8]) -> Result<Vec<(Caller, IdempotencyKey)>> {
        either!(self.find_operations(prefix).await)
    }

    async fn census(&self) -> Result<Census> {
        either!(self.census().await)
    }

    async fn outbox_census(&self) -> Result<OutboxCensus> {
        either!(self.outbox_census().await)
    }

    async fn operator_take(&self, take: OperatorTake) -> Result<Taken> {
        either!(self.operator_take(take).await)
    }

    async fn settle(
        &self,
        lease: &Lease,
        phase: Arc<dyn Operation<Any>>,
        settlement: &Settlement,
    ) -> Result<Option<StoredResponse>> {
        match self {
            Self::Sqlite(store) => {
                store
                    .settle(lease, Arc::new(OnSqlite(phase)), settlement)
                    .await
            }
            Self::Postgres(store) => {
                store
                    .settle(lease, Arc::new(OnPostgres(phase)), settlement)
                    .await
            }
        }
    }

    async fn actions(&self, operation: &OperationId) -> Result<Vec<ActionRecord>> {
        either!(self.actions(operation).await)
    }

    fn database_host(&self) -> Option<String> {
        either!(self.database_host())
    }
}

//! Prometheus metrics: what the idempotency layer decided, what the
//! sweeper deleted, how long requests took, operations resumed, the outbox
//! and the database written to. Your own metrics register in the same
//! registry ([`Metrics::with`]), so one `/metrics` answer holds both.

use crate::store::operator::{Census, OperationState, OutboxCensus};
use http::{Method, StatusCode};
use prometheus_client::encoding::{text::encode, EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::{
    counter::Counter, family::Family, gauge::Gauge, histogram::Histogram,
};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum Decision {
    executed,
    replayed,
    conflict,
    mismatch,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    outcome: Decision,
}

/// Who resumed an abandoned operation.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub(crate) enum ResumedBy {
    /// A client's retry of the same key.
    retry,
    /// The completer, on its own.
    completer,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResumedLabels {
    by: ResumedBy,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HostLabels {
    host: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
    status: u16,
}

/// Declares [`Metrics`] with one line per metric: its help text (the doc
/// comment), its name, its field and how it is made. `registered` makes
/// each and registers it under its name.
macro_rules! metrics {
    ($(#[doc = $help:literal] $name:literal => $field:ident: $type:ty = $make:expr;)*) => {
        /// The engine's metrics registry.
        pub struct Metrics {
            registry: Registry,
            $(#[doc = $help] $field: $type,)*
        }

        impl Metrics {
            /// Every metric, made and registered beside what `extra`
            /// registers.
            fn registered(extra: impl FnOnce(&mut Registry)) -> Self {
                let mut registry = Registry::default();
                extra(&mut registry);
                $(
                    let $field: $type = $make;
                    registry.register($name, $help.trim(), $field.clone());
                )*
                Self { registry, $($field,)* }
            }
        }
    };
}

metrics! {
    /// Keyed requests by what the idempotency layer did: executed, replayed, conflict (409), mismatch (422)
    "idempotency_requests" => decisions: Family<DecisionLabels, Counter> = Family::default();
    /// Idempotency records the sweeper expired after their TTL (each leaves a small tombstone)
    "idempotency_records_expired" => expired: Counter = Counter::default();
    /// Time from request to response head, by route and status
    "http_request_duration_seconds" => latency: Family<RouteLabels, Histogram> = Family::new_with_constructor(|| Histogram::new(LATENCY_BUCKETS));
    /// Operations stopped at a recovery point and resumed, by a retry or by the completer
    "operations_resumed" => resumed: Family<ResumedLabels, Counter> = Family::default();
    /// Operations set aside for an operator (dead letters): a step failed for good, or kept failing past --attention-after
    "operations_set_aside" => set_aside: Counter = Counter::default();
    /// Operations set aside for an operator now, not yet settled
    "operations_needing_attention" => needing_attention: Gauge = Gauge::default();
    /// Unfinished operations by state: running (a request or the completer holds its lease), stalled (its lease ran out; a retry or the completer goes on), needs-attention (set aside for an operator). Refreshed every --complete-interval
    "operations_unfinished" => unfinished: Family<StateLabels, Gauge> = Family::default();
    /// How long ago the oldest unfinished operation in each state started, in seconds (0 when there is none)
    "operations_oldest_unfinished_seconds" => oldest_unfinished: Family<StateLabels, Gauge<f64, AtomicU64>> = Family::default();
    /// Messages in the outbox not yet accepted by their transport
    "outbox_waiting" => outbox_waiting: Gauge = Gauge::default();
    /// How long the oldest message waiting in the outbox has waited since it was written, in seconds (0 when none waits)
    "outbox_oldest_waiting_seconds" => outbox_oldest_waiting: Gauge<f64, AtomicU64> = Gauge::default();
    /// Messages in the outbox that their transport refused for good (never sent again)
    "outbox_dead_letters" => outbox_dead: Gauge = Gauge::default();
    /// 1 for the PostgreSQL server (host:port) this instance writes to; no series on SQLite
    "database_host_info" => database_host: Family<HostLabels, Gauge> = Family::default();
}

/// The latency histogram's buckets, in seconds.
const LATENCY_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric at zero, each label value present.
    pub fn new() -> Self {
        Self::with(|_| {})
    }

    /// The engine's metrics and yours, in one registry: `register` adds
    /// yours.
    ///
    /// ```
    /// use exactly_once::Metrics;
    /// use prometheus_client::metrics::counter::Counter;
    ///
    /// let refunds = Counter::<u64>::default();
    /// let metrics = Metrics::with(|registry| {
    ///     registry.register("refunds", "Refunds made", refunds.clone())
    /// });
    /// refunds.inc();
    /// assert!(metrics.render().contains("refunds_total 1"));
    /// ```
    pub fn with(register: impl FnOnce(&mut Registry)) -> Self {
        let metrics = Self::registered(register);
        for outcome in [
            Decision::executed,
            Decision::replayed,
            Decision::conflict,
            Decision::mismatch,
        ] {
            let _ = metrics.decisions.get_or_create(&DecisionLabels { outcome });
        }
        for by in [ResumedBy::retry, ResumedBy::completer] {
            let _ = metrics.resumed.get_or_create(&ResumedLabels { by });
        }
        metrics.census(&Census::default());
        metrics
    }

    fn decided(&self, outcome: Decision) {
        self.decisions
            .get_or_create(&DecisionLabels { outcome })
            .inc();
    }

    /// An operation ran.
    pub(crate) fn executed(&self) {
        self.decided(Decision::executed);
    }
    /// A stored response was replayed.
    pub(crate) fn replayed(&self) {
        self.decided(Decision::replayed);
    }
    /// A 409: the key was in use.
    pub(crate) fn in_conflict(&self) {
        self.decided(Decision::conflict);
    }
    /// A 422: the key was reused with another request.
    pub(crate) fn mismatched(&self) {
        self.decided(Decision::mismatch);
    }
    /// The sweeper deleted `n` records.
    pub(crate) fn expired(&self, n: u64) {
        self.expired.inc_by(n);
    }
    /// An abandoned operation was resumed.
    pub(crate) fn resumed(&self, by: ResumedBy) {
        self.resumed.get_or_create(&ResumedLabels { by }).inc();
    }
    /// Messages waiting in the outbox now.
    pub(crate) fn outbox_waiting(&self, n: u64) {
        self.outbox_waiting
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    /// Messages refused for good, now.
    pub(crate) fn outbox_dead(&self, n: u64) {
        self.outbox_dead.set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    /// An operation was set aside for an operator.
    pub(crate) fn set_aside(&self) {
        self.set_aside.inc();
    }
    /// Operations set aside now.
    pub(crate) fn needing_attention(&self, n: u64) {
        self.needing_attention
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    /// The unfinished operations now, by state.
    pub(crate) fn census(&self, census: &Census) {
        for state in OperationState::UNFINISHED {
            let labels = StateLabels {
                state: state.as_str(),
            };
            let of = census.of(state);
            self.unfinished
                .get_or_create(&labels)
                .set(i64::try_from(of.count).unwrap_or(i64::MAX));
            self.oldest_unfinished
                .get_or_create(&labels)
                .set(of.oldest.as_secs_f64());
        }
        self.needing_attention(census.of(OperationState::NeedsAttention).count);
    }
    /// What the outbox holds now.
    pub(crate) fn outbox(&self, census: &OutboxCensus) {
        self.outbox_waiting(census.waiting);
        self.outbox_dead(census.dead);
        self.outbox_oldest_waiting
            .set(census.oldest_waiting.as_secs_f64());
    }

    /// A request to `route` (`None`: no route matched, the demo page or a
    /// 404) was answered `status` after `took`.
    pub fn request_done(
        &self,
        method: &Method,
        route: Option<&str>,
        status: StatusCode,
        took: Duration,
    ) {
        self.latency
            .get_or_create(&RouteLabels {
                method: method_label(method),
                route: route.unwrap_or("static").to_owned(),
                status: status.as_u16(),
            })
            .observe(took.as_secs_f64());
    }

    /// The database server written to now (`None`: SQLite): its series
    /// alone, at 1.
    pub fn database_host(&self, host: Option<String>) {
        self.database_host.clear();
        if let Some(host) = host {
            self.database_host
                .get_or_create(&HostLabels { host })
                .set(1);
        }
    }

    /// The Prometheus (OpenMetrics) text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// A method's label: its name if HTTP defines it, otherwise `_OTHER` (as
/// the OpenTelemetry conventions have it), so that made-up methods cannot
/// add series without end.
fn method_label(method: &Method) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method.as_str())
        .unwrap_or("_OTHER")
}

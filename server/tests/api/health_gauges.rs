//! `/metrics` says what `/healthz` would answer (`healthy`) and whether
//! the database answers at all (`database_reachable`), read at each
//! scrape: what the alerts `HealthCheckFailing` and `DatabaseUnreachable`
//! (deploy/prometheus/rules.yml) fire on. The database cut off is in the
//! outage harness (server/tests/outage).

use crate::helpers::TestApp;
use testkit::Server;

/// Both gauges at the scrape.
async fn gauges(app: &TestApp) -> (f64, f64) {
    (
        app.counter("healthy", &[]).await,
        app.counter("database_reachable", &[]).await,
    )
}

/// Healthy: both 1. A later release's contract migration in the ledger
/// (one this release cannot run beside): `/healthz` 503, `healthy` 0, the
/// database still answering (`database_reachable` 1).
#[tokio::test]
async fn the_health_gauges_follow_healthz_and_tell_a_refused_schema_from_an_unreachable_database() {
    let app = TestApp::start(Server::builder()).await;
    assert_eq!(app.server.health().await.unwrap(), 200);
    assert_eq!(gauges(&app).await, (1.0, 1.0));
    let database = app.server.database();
    let insert = "INSERT INTO exactly_once_migrations (version, applied_at, runs_beside, name) \
                  VALUES (99, 0, 99, '0099_a_later_contract')";
    database.sql(insert, insert).await.unwrap();
    assert_eq!(app.server.health().await.unwrap(), 503);
    assert_eq!(gauges(&app).await, (0.0, 1.0));
}

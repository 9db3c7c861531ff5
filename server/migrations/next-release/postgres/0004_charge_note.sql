-- Only in a build with the `next-release` feature: the release after this
-- one, as the rolling-deploy test (server/tests/rolling.rs) deploys it
-- beside this release on one database. Never shipped.
--
-- An expand migration: a nullable column (no table rewrite). The release
-- before (version 3) never names `note`, so it runs beside this one.
ALTER TABLE charges ADD COLUMN note TEXT;

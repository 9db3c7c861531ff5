//! A Citus cluster under Patroni (its `citus:` section): one scope, a
//! Patroni cluster per group (group 0 the coordinator, 1, 2… the
//! workers), each with `synchronous_mode: true`, and the database
//! `citus`, which Patroni creates with the extension. The coordinator's
//! Patroni keeps `pg_dist_node` pointing at each worker group's leader:
//! when a worker's primary dies, its standby is promoted and registered
//! in its place.

use super::{Patroni, CITUS_DATABASE, READY};
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};

impl Patroni {
    /// etcd and a Citus cluster: `nodes[g]` nodes in group `g` (`[1, 2, 1]`:
    /// a coordinator, a worker with a synchronous standby, a worker
    /// alone). Returns once every group has a leader, each group of two
    /// nodes or more a synchronous standby that streams, and the
    /// coordinator's `pg_dist_node` names every worker group's leader.
    pub async fn start_citus(nodes: &[usize]) -> Result<Self> {
        let mut cluster = Self::etcd().await?;
        for (group, &count) in (0u32..).zip(nodes) {
            for k in 0..count {
                let name = match group {
                    0 => format!("coordinator{}", k + 1),
                    _ => format!("worker{group}-{}", k + 1),
                };
                cluster.add(Some(group), name)?;
                if k == 0 {
                    cluster.wait_for_leader(Some(group)).await?;
                }
            }
        }
        for (group, &count) in (0u32..).zip(nodes) {
            if count > 1 {
                cluster.wait_until_synchronous_in(Some(group)).await?;
            }
        }
        cluster.wait_until_registered().await?;
        Ok(cluster)
    }

    /// The node leading `group` now, if any.
    pub async fn leader_of(&self, group: u32) -> Option<usize> {
        self.leader_in(Some(group)).await
    }

    /// `postgres://postgres@127.0.0.1:PORT/citus` of node `i`.
    pub fn citus_url(&self, i: usize) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{CITUS_DATABASE}",
            self.nodes[i].pg_port
        )
    }

    /// The PostgreSQL port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].pg_port
    }

    /// Waits until the coordinator's `pg_dist_node` has, for every worker
    /// group, its leader's port as the group's primary.
    pub async fn wait_until_registered(&self) -> Result<()> {
        let deadline = Instant::now() + READY;
        let mut seen = Vec::new();
        loop {
            match self.registered_as_led().await {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => seen.push(format!("{error:#}")),
            }
            if Instant::now() >= deadline {
                bail!(
                    "the coordinator's pg_dist_node did not follow the worker groups' leaders \
                     within {READY:?} (errors: {:?})\n{}",
                    seen.last(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether the coordinator's `pg_dist_node` names each worker group's
    /// leader now.
    async fn registered_as_led(&self) -> Result<bool> {
        let coordinator = self.leader_of(0).await.context("no coordinator leader")?;
        let (client, connection) =
            tokio_postgres::connect(&self.citus_url(coordinator), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT groupid, nodeport FROM pg_dist_node
                 WHERE noderole = 'primary' AND groupid > 0 AND isactive",
                &[],
            )
            .await?;
        let groups = self.nodes.iter().filter_map(|n| n.group).filter(|&g| g > 0);
        let mut groups: Vec<u32> = groups.collect();
        groups.dedup();
        for group in groups {
            let Some(leader) = self.leader_of(group).await else {
                return Ok(false);
            };
            let port = i32::from(self.nodes[leader].pg_port);
            let registered = rows
                .iter()
                .any(|r| r.get::<_, i32>(0) == group as i32 && r.get::<_, i32>(1) == port);
            if !registered {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

//! A Patroni cluster of the test's own: one etcd (Debian's `etcd-server`,
//! the v3 API) and Patroni nodes (Debian's `patroni`), each managing a
//! PostgreSQL cluster on a port of its own, with `synchronous_mode: true`
//! and the short timings that keep a test short (`ttl 10, loop_wait 2,
//! retry_timeout 4`). `scripts/patroni.sh` installs the packages.
//!
//! Patroni must not run as root: as root, it runs as `postgres`. It
//! starts the postmaster in a session of its own, so a machine's death is
//! [`Patroni::kill_machine`]: SIGKILL to Patroni's process group first
//! (or it would restart PostgreSQL), then to the postmaster's.
//! [`Patroni::replace`] brings a new machine in its place (a fresh data
//! folder, cloned from the leader by Patroni). Everything is killed on
//! drop.

use crate::maildev::free_port;
use crate::process::tail;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

mod citus;

/// Patroni's leader key lives this long without renewal (seconds): a
/// dead leader's standby takes over after about this.
pub const TTL: Duration = Duration::from_secs(10);
/// How long a start, or the cluster getting its synchronous standby, may
/// take on a loaded 2-core machine.
const READY: Duration = Duration::from_secs(90);

/// One Patroni node: Patroni and the PostgreSQL it runs.
#[derive(Debug)]
struct Node {
    name: String,
    /// The Citus group (0: the coordinator), on a Citus cluster.
    group: Option<u32>,
    pg_port: u16,
    api_port: u16,
    patroni: Option<Child>,
}

/// etcd and Patroni nodes.
#[derive(Debug)]
pub struct Patroni {
    dir: TempDir,
    etcd: Child,
    etcd_port: u16,
    nodes: Vec<Node>,
    owner: Option<(u32, u32)>,
    bin: PathBuf,
    http: reqwest::Client,
}

impl Patroni {
    /// etcd, then `nodes` Patroni nodes: the first bootstraps and leads,
    /// the others clone it. Returns once the cluster has a leader and a
    /// synchronous standby that streams.
    pub async fn start(nodes: usize) -> Result<Self> {
        let mut cluster = Self::etcd().await?;
        for i in 0..nodes {
            cluster.add(None, format!("node{}", i + 1))?;
            if i == 0 {
                cluster.wait_for_leader(None).await?;
            }
        }
        cluster.wait_until_synchronous().await?;
        Ok(cluster)
    }

    /// The folder and etcd, with no node yet.
    async fn etcd() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("testkit-patroni-")
            .tempdir()?;
        let owner = crate::cluster::postgres_owner()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_dir = dir.path().join("etcd");
        let etcd = Command::new("etcd")
            .args(["--name", "etcd"])
            .arg("--data-dir")
            .arg(&etcd_dir)
            .arg("--listen-client-urls")
            .arg(format!("http://127.0.0.1:{etcd_port}"))
            .arg("--advertise-client-urls")
            .arg(format!("http://127.0.0.1:{etcd_port}"))
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer_port}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer_port}"))
            .arg("--initial-cluster")
            .arg(format!("etcd=http://127.0.0.1:{peer_port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(dir.path().join("etcd.log"))?)
            .process_group(0)
            .spawn()
            .context("starting etcd (scripts/patroni.sh installs etcd-server)")?;
        let cluster = Self {
            dir,
            etcd,
            etcd_port,
            nodes: Vec::new(),
            owner,
            bin: crate::cluster::bin_dir()?,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
        };
        cluster.wait_for_etcd().await?;
        Ok(cluster)
    }

    /// One more node, `name`, in `group` on a Citus cluster, started.
    fn add(&mut self, group: Option<u32>, name: String) -> Result<()> {
        self.nodes.push(Node {
            name,
            group,
            pg_port: crate::cluster::steady_port()?,
            api_port: free_port()?,
            patroni: None,
        });
        self.spawn(self.nodes.len() - 1)
    }

    /// `127.0.0.1:PORT` of each node's PostgreSQL, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.pg_port))
            .collect()
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres` of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.nodes[i].pg_port
        )
    }

    /// The index of the node `/cluster` names leader, if any.
    pub async fn leader_now(&self) -> Option<usize> {
        self.leader_in(None).await
    }

    /// The index of the node the `/cluster` of `group`'s nodes names leader.
    async fn leader_in(&self, group: Option<u32>) -> Option<usize> {
        let cluster = self.cluster(group).await.ok()?;
        let name = member(&cluster, "leader")?;
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Waits until `/cluster` shows a leader and a `sync_standby` and the
    /// leader's `pg_stat_replication` says `sync`.
    pub async fn wait_until_synchronous(&self) -> Result<()> {
        self.wait_until_synchronous_in(None).await
    }

    /// [`Patroni::wait_until_synchronous`] for `group`'s nodes.
    async fn wait_until_synchronous_in(&self, group: Option<u32>) -> Result<()> {
        let deadline = Instant::now() + READY;
        loop {
            if let Ok(cluster) = self.cluster(group).await {
                if let (Some(leader), Some(_)) =
                    (member(&cluster, "leader"), member(&cluster, "sync_standby"))
                {
                    let i = self.nodes.iter().position(|n| n.name == leader);
                    if let Some(i) = i {
                        if self.sync_streams(i).await.unwrap_or(false) {
                            return Ok(());
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "no synchronous standby within {READY:?}; /cluster: {:?}\n{}",
                    self.cluster(group).await.ok(),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL to node `i`'s Patroni (its process group), then to its
    /// postmaster's group: its machine died. Returns once none of them is
    /// left.
    pub fn kill_machine(&mut self, i: usize) -> Result<()> {
        let data = self.data(i);
        let node = &mut self.nodes[i];
        if let Some(mut patroni) = node.patroni.take() {
            kill_group(patroni.id())?;
            patroni.wait()?;
        }
        if let Some(postmaster) = postmaster_pid(&data) {
            kill_group(postmaster)?;
        }
        // Each backend leads a group of its own: the rest of the machine.
        for pid in crate::cluster::processes_in(&data) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while postmaster_pid(&data).is_some_and(alive) {
            if Instant::now() >= deadline {
                bail!("the postmaster of {} outlived SIGKILL", node.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// A new machine in node `i`'s place (its data folder gone): Patroni
    /// starts there and clones the leader. Returns once the cluster is
    /// synchronous again.
    pub async fn replace(&mut self, i: usize) -> Result<()> {
        let data = self.data(i);
        if data.exists() {
            std::fs::remove_dir_all(&data)?;
        }
        self.spawn(i)?;
        self.wait_until_synchronous_in(self.nodes[i].group).await
    }

    /// Every node's Patroni log, last lines.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                format!(
                    "--- {} (patroni and postgres):\n{}",
                    n.name,
                    tail(&self.dir.path().join(format!("{}.log", n.name)))
                )
            })
            .collect()
    }

    fn data(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.nodes[i].name)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let config = self.dir.path().join(format!("{}.yml", self.nodes[i].name));
        std::fs::write(&config, self.config(i))?;
        let log = File::create(self.dir.path().join(format!("{}.log", self.nodes[i].name)))?;
        let mut command = Command::new("patroni");
        command
            .arg(&config)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        let child = command
            .spawn()
            .context("starting patroni (scripts/patroni.sh installs it)")?;
        self.nodes[i].patroni = Some(child);
        Ok(())
    }

    /// The node's configuration (what docs/DEPLOYING.md shows).
    fn config(&self, i: usize) -> String {
        let node = &self.nodes[i];
        let dir = self.dir.path().display();
        format!(
            "scope: shop
name: {name}
restapi:
  listen: 127.0.0.1:{api}
  connect_address: 127.0.0.1:{api}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      parameters:
        max_connections: 300
        wal_level: replica
        max_wal_senders: 10
        fsync: 'off'
  initdb:
  - encoding: UTF8
  - auth: trust
  pg_hba:
  - local all all trust
  - host replication all 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {dir}/{name}
  bin_dir: {bin}
  pgpass: {dir}/{name}.pgpass
  basebackup:
    checkpoint: fast
  authentication:
    replication:
      username: postgres
    superuser:
      username: postgres
  parameters:
    unix_socket_directories: '{dir}'
{citus_parameters}{citus}watchdog:
  mode: 'off'
",
            name = node.name,
            api = node.api_port,
            etcd = self.etcd_port,
            ttl = TTL.as_secs(),
            pg = node.pg_port,
            bin = self.bin.display(),
            citus_parameters = node.group.map(citus_parameters).unwrap_or_default(),
            citus = node.group.map(citus_section).unwrap_or_default(),
        )
    }

    async fn wait_for_etcd(&self) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/health", self.etcd_port);
        let deadline = Instant::now() + READY;
        loop {
            let healthy = self.http.get(&url).send().await;
            if let Ok(answer) = healthy {
                if let Ok(body) = answer.json::<Value>().await {
                    if body["health"] == "true" {
                        return Ok(());
                    }
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd not healthy within {READY:?}:\n{}",
                    tail(&self.dir.path().join("etcd.log"))
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_for_leader(&self, group: Option<u32>) -> Result<()> {
        let deadline = Instant::now() + READY;
        while self.leader_in(group).await.is_none() {
            if Instant::now() >= deadline {
                bail!("no leader within {READY:?}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// `GET /cluster` of the first node of `group` whose Patroni answers
    /// (on a Citus cluster, each group is a Patroni cluster of its own).
    async fn cluster(&self, group: Option<u32>) -> Result<Value> {
        let running = self.nodes.iter().filter(|n| n.patroni.is_some());
        for node in running.filter(|n| n.group == group) {
            let url = format!("http://127.0.0.1:{}/cluster", node.api_port);
            if let Ok(answer) = self.http.get(&url).send().await {
                if let Ok(body) = answer.json::<Value>().await {
                    return Ok(body);
                }
            }
        }
        Err(anyhow!("no Patroni answers /cluster"))
    }

    /// Whether node `i`'s `pg_stat_replication` has a `sync` standby.
    async fn sync_streams(&self, i: usize) -> Result<bool> {
        let (client, connection) =
            tokio_postgres::connect(&self.url(i), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = 'sync'",
                &[],
            )
            .await?;
        Ok(!rows.is_empty())
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            let _ = self.kill_machine(i);
        }
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
    }
}

/// The member of `/cluster` with `role`.
fn member(cluster: &Value, role: &str) -> Option<String> {
    cluster["members"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == role)
        .and_then(|m| m["name"].as_str())
        .map(str::to_owned)
}

/// The postmaster's pid, from `postmaster.pid` in its data folder.
fn postmaster_pid(data: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
}

/// SIGKILL to the process group of `pid`; never our own.
fn kill_group(pid: u32) -> Result<()> {
    let group = crate::cluster::process_group(pid)?;
    let ours = crate::cluster::process_group(std::process::id())?;
    if group == ours {
        bail!("{pid} is in the test's own process group ({group})");
    }
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stderr(Stdio::null())
        .status()?;
    Ok(())
}

/// The database Patroni makes a Citus database on every node.
const CITUS_DATABASE: &str = "citus";

/// The node's `citus:` section.
fn citus_section(group: u32) -> String {
    format!("citus:\n  group: {group}\n  database: {CITUS_DATABASE}\n")
}

/// The node's own PostgreSQL parameters: on a worker, the bound on a lock
/// wait the engine sets in its own sessions (Citus does not carry a
/// session's settings to the workers, where the rows are locked).
fn citus_parameters(group: u32) -> &'static str {
    if group > 0 {
        "    lock_timeout: 5s\n"
    } else {
        ""
    }
}

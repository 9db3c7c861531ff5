//! What the tests do to a cluster's processes: freeze and thaw them (a
//! hung machine), kill them in the ways a machine or an operator does,
//! and look for what a kill left behind.

use super::*;

impl Postgres {
    /// SIGSTOP to every process of the cluster, as when its machine
    /// hangs: connections stay open and nothing answers (on loopback the
    /// kernel still acknowledges what is sent to them). Not the
    /// postmaster's process group alone: PostgreSQL makes each backend the
    /// leader of a group of its own (`setsid` in `InitPostmasterChild`), so
    /// the postmaster is stopped first (it forks no more), then every
    /// process working in the data folder, twice over to catch one forked
    /// meanwhile. Never the test's own process.
    pub fn freeze(&self) -> Result<()> {
        self.signal_all("STOP")
    }

    /// SIGCONT to the processes [`Postgres::freeze`] stopped.
    pub fn thaw(&self) -> Result<()> {
        self.signal_all("CONT")
    }

    fn signal_all(&self, signal: &str) -> Result<()> {
        let postmaster = {
            let postmaster = self.postmaster.lock().unwrap();
            postmaster
                .as_ref()
                .ok_or_else(|| anyhow!("SIG{signal}: PostgreSQL is not running"))?
                .id()
        };
        let ours = std::process::id();
        let send = |pid: u32| -> Result<()> {
            if pid == ours {
                bail!("refusing to signal the test's own process");
            }
            // One may exit meanwhile: no error for it.
            Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status()
                .context("running kill")?;
            Ok(())
        };
        send(postmaster)?;
        for _ in 0..2 {
            for pid in self.processes() {
                send(pid)?;
            }
        }
        Ok(())
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once
    /// without a checkpoint (crash recovery at the next start). Returns
    /// once the postmaster has exited.
    pub fn kill_immediate(&self) -> Result<()> {
        self.stop("immediate")
    }

    /// SIGKILL to the postmaster only, as an OOM killer would: its backends
    /// are left to notice and exit on their own (a backend whose client
    /// keeps it busy goes on serving it meanwhile; see
    /// [`Postgres::wait_until_gone`]), and the next start must wait until
    /// they have.
    pub fn sigkill_postmaster(&self) -> Result<()> {
        let mut postmaster = self.postmaster.lock().unwrap();
        let mut child = postmaster
            .take()
            .ok_or_else(|| anyhow!("sigkill_postmaster: PostgreSQL is not running"))?;
        child.kill().context("SIGKILL to the postmaster")?;
        child.wait()?;
        Ok(())
    }

    /// SIGKILL to the postmaster and to every process of the cluster at
    /// once, as when its machine loses power; returns once none is left.
    pub fn kill_machine(&self) -> Result<()> {
        self.sigkill_postmaster()?;
        self.kill_leftovers()
    }

    /// SIGKILL to every process still working in the cluster's folder (an
    /// orphaned backend of a postmaster already gone); returns once none
    /// is left.
    pub fn kill_leftovers(&self) -> Result<()> {
        for pid in self.processes() {
            // One may exit on its own meanwhile: no error for it.
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        self.wait_until_gone(Duration::from_secs(10))?;
        Ok(())
    }

    /// The processes still working in the cluster's folder, each as
    /// `PID NAME STATE` (from `/proc`), for a report.
    pub fn leftovers(&self) -> Vec<String> {
        self.processes()
            .into_iter()
            .map(|pid| {
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let field = |name: &str| {
                    status
                        .lines()
                        .find_map(|line| line.strip_prefix(name))
                        .map(str::trim)
                        .unwrap_or("?")
                        .to_owned()
                };
                format!("{pid} {} {}", field("Name:"), field("State:"))
            })
            .collect()
    }

    /// Waits until no process of the cluster is left (the postmaster's
    /// orphaned backends after [`Postgres::sigkill_postmaster`]); how long
    /// that took. An error after `timeout`.
    pub fn wait_until_gone(&self, timeout: Duration) -> Result<Duration> {
        let start = Instant::now();
        loop {
            let left = self.processes();
            if left.is_empty() {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                bail!("processes of the cluster still running after {timeout:?}: {left:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The processes working in the cluster's data folder: the postmaster
    /// and its children, orphaned ones included (a zombie has no folder).
    fn processes(&self) -> Vec<u32> {
        processes_in(&self.data())
    }
}

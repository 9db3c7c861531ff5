//! A streaming standby of a cluster, and its promotion.

use super::*;

impl Postgres {
    /// A streaming standby of this cluster: `pg_basebackup -R -X stream`
    /// into a new folder, started on a port of its own with `settings`
    /// (and `synchronous_standby_names` empty, so that once promoted it
    /// waits for no standby of its own). Returns once it accepts
    /// connections; see [`Postgres::promote`].
    pub fn standby(&self, settings: &[&str]) -> Result<Self> {
        let mut all = vec!["synchronous_standby_names="];
        all.extend_from_slice(settings);
        let standby = Self::new(None, &all)?;
        let backup = standby
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-R", "-X", "stream"])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-D")
            .arg(&standby.data)
            .output()
            .context("running pg_basebackup")?;
        if !backup.status.success() {
            bail!(
                "pg_basebackup failed ({}): {}",
                backup.status,
                String::from_utf8_lossy(&backup.stderr)
            );
        }
        standby.restart()?;
        Ok(standby)
    }

    /// `pg_ctl promote -w`: a standby becomes a primary; returns once it
    /// accepts writes.
    pub fn promote(&self) -> Result<()> {
        let output = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "30", "promote"])
            .output()
            .context("running pg_ctl promote")?;
        if !output.status.success() {
            bail!(
                "pg_ctl promote failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

//! Base backups, WAL archiving and a recovery to a named restore point:
//! a point-in-time recovery as docs/OPERATIONS.md describes it.

use super::*;

impl Postgres {
    /// [`Postgres::start_with`], archiving every finished WAL segment
    /// into a folder of the cluster's own (`archive_mode`, `cp`), so it
    /// can be recovered from a base backup ([`Postgres::recover_to`]).
    pub fn start_archiving(settings: &[&str]) -> Result<Self> {
        let mut cluster = Self::new(None, settings)?;
        let archive = cluster.archive();
        std::fs::create_dir(&archive)?;
        cluster.hand_to_owner(&archive)?;
        cluster.settings.extend([
            "archive_mode=on".to_owned(),
            format!("archive_command=cp %p {}/%f", archive.display()),
        ]);
        cluster.initdb(false)?;
        cluster.restart()?;
        Ok(cluster)
    }

    /// `pg_basebackup -X stream` into a new folder of the cluster's own:
    /// the backup's path.
    pub fn base_backup(&self) -> Result<PathBuf> {
        let backup = self
            .dir
            .path()
            .join(format!("backup-{}", uuid::Uuid::new_v4().simple()));
        let output = self
            .command("pg_basebackup")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-X", "stream"])
            .args(["--checkpoint", "fast"])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-D")
            .arg(&backup)
            .output()
            .context("running pg_basebackup")?;
        if !output.status.success() {
            bail!(
                "pg_basebackup failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(backup)
    }

    /// The cluster's machine lost, then recovered: the data folder
    /// replaced by `backup` ([`Postgres::base_backup`]), the archived WAL
    /// replayed up to the restore point `name`
    /// (`recovery_target_name`), then promoted. Returns once it accepts
    /// connections; it may still be replaying (`pg_is_in_recovery()`).
    pub fn recover_to(&self, backup: &Path, name: &str) -> Result<()> {
        self.kill_machine()?;
        std::fs::remove_dir_all(&self.data)?;
        let copied = Command::new("cp")
            .arg("-a")
            .arg(backup)
            .arg(&self.data)
            .status()
            .context("copying the backup in")?;
        if !copied.success() {
            bail!(
                "cp -a {} {}: {copied}",
                backup.display(),
                self.data.display()
            );
        }
        let settings = format!(
            "\nrestore_command = 'cp {}/%f %p'\nrecovery_target_name = '{name}'\n\
             recovery_target_action = 'promote'\n",
            self.archive().display()
        );
        let auto = self.data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto)?;
        conf.push_str(&settings);
        std::fs::write(&auto, conf)?;
        let signal = self.data.join("recovery.signal");
        std::fs::write(&signal, "")?;
        for path in [&self.data, &auto, &signal] {
            self.hand_to_owner(path)?;
        }
        self.restart().map(|_| ())
    }

    fn archive(&self) -> PathBuf {
        self.dir.path().join("archive")
    }

    /// `path` owned by the user PostgreSQL runs as, when that is not us.
    fn hand_to_owner(&self, path: &Path) -> Result<()> {
        if let Some(owner) = self.owner {
            std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid))
                .with_context(|| format!("handing {} to postgres", path.display()))?;
        }
        Ok(())
    }
}

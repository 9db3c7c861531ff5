//! What the request target runs on: built once per process (a runtime, a
//! folder, the router's config, a migrated template database), and a fresh
//! copy of the template per input.

use crate::config::Config;
use exactly_once::SqliteStore;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Built once per process: a runtime, a folder, the router's config and a
/// template database.
pub(super) struct App {
    pub(super) runtime: tokio::runtime::Runtime,
    dir: PathBuf,
    pub(super) config: Config,
    /// A migrated database that every input's database is copied from.
    template: PathBuf,
    template_store: Option<SqliteStore>,
    databases: AtomicU64,
    /// `SERVER_FUZZ_TRACE=1`: print every request and answer to stderr.
    pub(super) trace: bool,
}

impl App {
    pub(super) fn get() -> &'static App {
        static APP: OnceLock<App> = OnceLock::new();
        APP.get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            };
            remove_stale_folders(&base);
            let dir = base.join(format!("{FOLDER_PREFIX}{}", std::process::id()));
            let www = dir.join("www");
            std::fs::create_dir_all(&www).expect("create the fuzzing folder");
            std::fs::write(www.join("index.html"), "<!doctype html><title>fuzz</title>")
                .expect("write the demo page");
            let database = format!("sqlite://{}", dir.join("shop.db").display());
            let www_arg = www.display().to_string();
            let mut config = <Config as clap::Parser>::try_parse_from([
                "server",
                "--database",
                &database,
                "--durability",
                "relaxed",
                "--www",
                &www_arg,
            ])
            .expect("the fuzzing config parses");
            // Whatever the environment says: chaos would exit the process.
            config.chaos = false;
            config.cors_origins.clear();
            let mut app = App {
                runtime: tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime"),
                template: dir.join("template.db"),
                template_store: None,
                dir,
                config,
                databases: AtomicU64::new(0),
                trace: std::env::var_os("SERVER_FUZZ_TRACE").is_some_and(|v| v == "1"),
            };
            // Kept open and idle for good, so its files never change.
            app.template_store = Some(app.open(&app.template));
            app
        })
    }

    /// A new database: a copy of the migrated template (migrating a new
    /// file for every input would cost more than the input), deleted again
    /// when dropped.
    pub(super) fn fresh_database(&self) -> Database {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("db-{n}.db"));
        for suffix in ["", "-wal"] {
            let from = with_suffix(&self.template, suffix);
            if from.exists() {
                std::fs::copy(&from, with_suffix(&path, suffix)).expect("copy the template");
            }
        }
        Database {
            store: Arc::new(self.open(&path)),
            path,
        }
    }

    fn open(&self, path: &Path) -> SqliteStore {
        SqliteStore::open(path, crate::startup::sqlite_options(&self.config))
            .expect("open a database")
    }
}

/// `path` with `suffix` appended to its file name (`-wal`, `-shm`).
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The fuzzing folder of process N is `FOLDER_PREFIX` + N.
const FOLDER_PREFIX: &str = "server-fuzz-";

/// Removes the folders of fuzzing processes that have exited.
fn remove_stale_folders(base: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return; // no way to tell which processes still run
    }
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FOLDER_PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !proc.join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One input's database.
pub(super) struct Database {
    pub(super) store: Arc<SqliteStore>,
    path: PathBuf,
}

impl Drop for Database {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let _ = std::fs::remove_file(with_suffix(&self.path, suffix));
        }
    }
}

//! The server processes under attack (one, or two on one PostgreSQL
//! database), each restarted on its address and database whenever it dies,
//! and the killer that sends them SIGKILL: at random moments, now and then
//! to a start before or while it prints `listening on`, and (when asked)
//! as the completer resumes an abandoned operation.

use crate::tally::Tally;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use testkit::{Caller, KillAt, KilledStart, Server};

/// The share of restarts that are killed on purpose first, a random moment
/// after their spawn.
const KILLED_STARTS: f64 = 0.25;
/// What the completer logs as it takes over an abandoned operation, and as
/// it is done with it.
const RESUMES: &str = "the completer resumes an abandoned operation";
const RESUMED: [&str; 2] = [
    "the completer finished the operation",
    "the completer could not finish the operation",
];

/// How the killer works.
pub(crate) struct Plan {
    /// The SIGKILLs at random moments.
    pub(crate) kills: usize,
    /// Milliseconds between two of them.
    pub(crate) gap: Range<u64>,
    pub(crate) seed: u64,
    /// At most this many more, each as the completer of the victim starts
    /// resuming an abandoned operation (read in its log).
    pub(crate) recovery_kills: usize,
}

/// What the killer did.
#[derive(Debug, Default)]
pub(crate) struct Kills {
    /// For each kill at a random moment, the requests out to the instance
    /// it killed.
    pub(crate) in_flight: Vec<usize>,
    /// Starts killed on purpose: before `listening on`, after it, and the
    /// ones that had exited on their own first.
    pub(crate) starts_killed: [usize; 3],
    /// Kills as the completer resumed an operation, and how many of those
    /// came before the completer was done with it.
    pub(crate) in_recovery: usize,
    pub(crate) mid_resume: usize,
}

/// One server process and the part of its log read so far.
struct Instance {
    server: Server,
    log: LogTail,
}

/// The server processes, each restarted on the same address and database
/// whenever it dies.
pub(crate) struct Fleet {
    instances: Vec<Mutex<Instance>>,
    restarts: AtomicUsize,
    /// How long the last restart took to print `listening on`.
    start_time: Mutex<Duration>,
}

impl Fleet {
    pub(crate) fn new(servers: Vec<Server>) -> Self {
        Self {
            instances: servers
                .into_iter()
                .map(|server| {
                    let log = LogTail::at_end(server.log_path().to_owned());
                    Mutex::new(Instance { server, log })
                })
                .collect(),
            restarts: AtomicUsize::new(0),
            start_time: Mutex::new(Duration::from_millis(50)),
        }
    }

    /// How many instances.
    pub(crate) fn len(&self) -> usize {
        self.instances.len()
    }

    /// The customer `token` of instance `i`, through `http`.
    pub(crate) fn caller(&self, i: usize, token: &str, http: &reqwest::Client) -> Caller {
        let instance = self.instances[i].lock().unwrap();
        instance.server.bearer(token).with_http(http.clone())
    }

    /// How many times a process died (killed, or exited on purpose) and
    /// was started again.
    pub(crate) fn restarts(&self) -> usize {
        self.restarts.load(Ordering::Relaxed)
    }

    /// A new process for the dead one of `instance`; a quarter of the time
    /// a first one is killed a random moment after its spawn (up to 1.5
    /// times what a start takes), before or after it prints `listening
    /// on`, and the next one must start all the same.
    fn restart(&self, instance: &mut Instance, rng: &mut StdRng, kills: &mut Kills) {
        instance.log.skip_to_end();
        if rng.random_bool(KILLED_STARTS) {
            let typical = *self.start_time.lock().unwrap();
            let after = rng.random_range(Duration::ZERO..=typical * 3 / 2);
            let killed = instance
                .server
                .restart_and_kill(&KillAt::After(after))
                .expect("a start killed on purpose");
            // Allowed (the next start must come up all the same); worth a
            // look unless it served an `exit-after-commit` (137) first.
            if let KilledStart::Exited(status) = killed {
                if status.code() != Some(137) {
                    let log = instance.log.read_new();
                    let last: Vec<&str> = log.lines().rev().take(3).collect();
                    eprintln!("a start killed on purpose had exited first ({status}): {last:?}");
                }
            }
            kills.starts_killed[match killed {
                KilledStart::Starting => 0,
                KilledStart::Listening => 1,
                KilledStart::Exited(_) => 2,
            }] += 1;
        }
        let started = Instant::now();
        instance
            .server
            .restart()
            .expect("a restart after a kill, at start-up or later");
        *self.start_time.lock().unwrap() = started.elapsed();
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// SIGKILL to `instance`, then a new process on its address.
    fn kill_and_restart(&self, instance: &mut Instance, rng: &mut StdRng, kills: &mut Kills) {
        instance.server.kill().expect("SIGKILL");
        self.restart(instance, rng, kills);
    }

    /// Restarts every instance that exited on its own (chaos `exit-…`).
    fn revive(&self, rng: &mut StdRng, kills: &mut Kills) {
        for instance in &self.instances {
            let mut instance = instance.lock().unwrap();
            if instance.server.try_wait().unwrap().is_some() {
                self.restart(&mut instance, rng, kills);
            }
        }
    }

    /// While recovery kills are left: kills an instance whose log shows its
    /// completer starting to resume an operation, half the time it does.
    fn kill_in_recovery(&self, plan: &Plan, rng: &mut StdRng, kills: &mut Kills) {
        for instance in &self.instances {
            if kills.in_recovery >= plan.recovery_kills {
                return;
            }
            let mut instance = instance.lock().unwrap();
            let seen = instance.log.read_new();
            if !seen.contains(RESUMES) || !rng.random_bool(0.5) {
                continue;
            }
            instance.server.kill().expect("SIGKILL");
            kills.in_recovery += 1;
            // Whatever the process logged before it died: was it done?
            let whole = seen + &instance.log.read_new();
            let after = &whole[whole.rfind(RESUMES).unwrap_or_default()..];
            if !RESUMED.iter().any(|done| after.contains(done)) {
                kills.mid_resume += 1;
            }
            self.restart(&mut instance, rng, kills);
        }
    }

    /// The killer (run it on a blocking thread): `plan.kills` SIGKILLs,
    /// each after a random gap and to a random instance, the recovery
    /// kills meanwhile, reviving the instances that exited; then clears
    /// `killing` and keeps reviving until `done` is set (see [`Done`]).
    pub(crate) fn kill_at_random(
        &self,
        plan: &Plan,
        tally: &Tally,
        killing: &AtomicBool,
        done: &AtomicBool,
    ) -> Kills {
        let mut rng = StdRng::seed_from_u64(plan.seed);
        let mut kills = Kills::default();
        let gap = |rng: &mut StdRng| Duration::from_millis(rng.random_range(plan.gap.clone()));
        let mut next = Instant::now() + gap(&mut rng);
        while kills.in_flight.len() < plan.kills && !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(2));
            self.revive(&mut rng, &mut kills);
            if plan.recovery_kills > 0 {
                self.kill_in_recovery(plan, &mut rng, &mut kills);
            }
            if Instant::now() >= next {
                let victim = rng.random_range(0..self.len());
                kills.in_flight.push(tally.in_flight(victim));
                let mut instance = self.instances[victim].lock().unwrap();
                self.kill_and_restart(&mut instance, &mut rng, &mut kills);
                next = Instant::now() + gap(&mut rng);
            }
        }
        killing.store(false, Ordering::Release);
        // Keep reviving until the senders are done with `exit-…` chaos.
        while !done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(2));
            self.revive(&mut rng, &mut kills);
        }
        kills
    }
}

/// Sets its flag when dropped: the senders are done, or the test failed
/// first; either way the killer stops (else a failed test would hang, its
/// runtime waiting for the killer's thread).
pub(crate) struct Done(pub(crate) Arc<AtomicBool>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// A log file read as it grows, whole lines at a time. Empty with
/// `TEST_LOG` set (the log then goes to the test's stderr).
struct LogTail {
    path: PathBuf,
    read: u64,
}

impl LogTail {
    /// From what is appended to `path` from now on.
    fn at_end(path: PathBuf) -> Self {
        let mut tail = Self { path, read: 0 };
        tail.skip_to_end();
        tail
    }

    /// Forgets what the log holds so far.
    fn skip_to_end(&mut self) {
        self.read = std::fs::metadata(&self.path).map_or(0, |m| m.len());
    }

    /// The whole lines appended since the last read.
    fn read_new(&mut self) -> String {
        let mut bytes = Vec::new();
        if let Ok(mut file) = File::open(&self.path) {
            let _ = file.seek(SeekFrom::Start(self.read));
            let _ = file.read_to_end(&mut bytes);
        }
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |n| n + 1);
        self.read += whole as u64;
        String::from_utf8_lossy(&bytes[..whole]).into_owned()
    }
}

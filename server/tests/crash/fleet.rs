//! The server processes under attack (one, or two on one PostgreSQL
//! database), each restarted on its address and database whenever it dies,
//! and the killer that sends them SIGKILL at random moments.

use crate::tally::Tally;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use testkit::{Caller, Server};

/// The server processes, each restarted on the same address and database
/// whenever it dies.
pub(crate) struct Fleet {
    servers: Vec<Mutex<Server>>,
    restarts: AtomicUsize,
}

impl Fleet {
    pub(crate) fn new(servers: Vec<Server>) -> Self {
        Self {
            servers: servers.into_iter().map(Mutex::new).collect(),
            restarts: AtomicUsize::new(0),
        }
    }

    /// How many instances.
    pub(crate) fn len(&self) -> usize {
        self.servers.len()
    }

    /// The customer `token` of instance `i`, through `http`.
    pub(crate) fn caller(&self, i: usize, token: &str, http: &reqwest::Client) -> Caller {
        let server = self.servers[i].lock().unwrap();
        server.bearer(token).with_http(http.clone())
    }

    /// How many times a process died (killed, or exited on purpose) and
    /// was started again.
    pub(crate) fn restarts(&self) -> usize {
        self.restarts.load(Ordering::Relaxed)
    }

    /// SIGKILL to instance `i`, then a new process on its address.
    fn kill_and_restart(&self, i: usize) {
        let mut server = self.servers[i].lock().unwrap();
        server.kill().expect("SIGKILL");
        server.restart().expect("restart");
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// Restarts every instance that exited on its own (chaos `exit-…`).
    fn revive(&self) {
        for server in &self.servers {
            let mut server = server.lock().unwrap();
            if server.try_wait().unwrap().is_some() {
                server.restart().expect("restart");
                self.restarts.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The killer (run it on a blocking thread): `kills` SIGKILLs, each
    /// after a random gap of `gap` milliseconds and to a random instance, reviving the ones that exited
    /// meanwhile; then clears `killing` and keeps reviving until it is set
    /// again (the senders are done). For each kill, how many requests were
    /// out to the instance it killed.
    pub(crate) fn kill_at_random(
        &self,
        kills: usize,
        gap: Range<u64>,
        seed: u64,
        tally: &Tally,
        killing: &AtomicBool,
    ) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut in_flight_at_kills = Vec::new();
        let mut next = Instant::now() + Duration::from_millis(rng.random_range(gap.clone()));
        while in_flight_at_kills.len() < kills {
            std::thread::sleep(Duration::from_millis(2));
            self.revive();
            if Instant::now() >= next {
                let victim = rng.random_range(0..self.len());
                in_flight_at_kills.push(tally.in_flight(victim));
                self.kill_and_restart(victim);
                next = Instant::now() + Duration::from_millis(rng.random_range(gap.clone()));
            }
        }
        killing.store(false, Ordering::Release);
        // Keep reviving until the senders are done with `exit-…` chaos.
        while !killing.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(2));
            self.revive();
        }
        in_flight_at_kills
    }
}

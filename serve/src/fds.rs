//! Room for the connections: the process's soft limit on open files
//! raised (up to the hard limit) so that `max_connections` can be reached.

/// Files a server needs beside its connections: the database, logs,
/// outgoing connections to the provider and the mail server.
const BESIDE_CONNECTIONS: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` so that `max_connections` connections
/// fit beside the server's other files; warns when the hard limit is too
/// low (past it, accepting fails and new connections wait all the same).
pub(crate) fn make_room_for(max_connections: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let wanted = (max_connections as u64).saturating_add(BESIDE_CONNECTIONS);
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft >= wanted {
        return;
    }
    let raised = wanted.min(hard);
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
        tracing::warn!(error = %e, soft, "cannot raise the limit on open files");
        return;
    }
    if raised < wanted {
        tracing::warn!(
            open_files = raised,
            max_connections,
            "the limit on open files (ulimit -n) is below --max-connections and the files \
             a server needs beside them: raise it, or lower --max-connections"
        );
    }
}

//! The line a spawned process prints first, `listening on http://ADDR`, and
//! how long to wait for it.

use std::sync::mpsc;
use std::time::Duration;

/// How long a process may take to print its address (a debug build on a
/// loaded 2-core machine).
pub(crate) const STARTUP: Duration = Duration::from_secs(30);

/// The first line a process printed on stdout: `None` at end of file.
pub(crate) type FirstLine = mpsc::Receiver<Option<std::io::Result<String>>>;

/// What a process prints, followed by `http://ADDR` (or `https://ADDR`),
/// once it serves.
pub(crate) const LISTENING: &str = "listening on ";

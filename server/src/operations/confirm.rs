//! What `server operations` asks of the person running it before it acts,
//! and who that person is to the operating system.

use std::io::{BufRead, IsTerminal, Write};

/// Goes on when `yes` (`--yes`) or when the person at the terminal answers
/// `y` to `question`; otherwise the one line that says why not (`what`
/// names the action: "retried", "settled"). Without a terminal on stdin
/// and without `--yes`, nothing is asked and the action is refused.
pub(super) fn confirmed(yes: bool, question: &str, what: &str) -> Result<(), String> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(format!(
            "not {what}: there is no terminal to confirm on; add --yes to go ahead without asking"
        ));
    }
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{question} [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("not {what}: the answer could not be read: {e}"))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(format!("not {what}: not confirmed")),
    }
}

/// The name of the process's real user (who logged in, whatever
/// `--operator` says), or its uid when the system has no name for it.
pub(super) fn os_user() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}

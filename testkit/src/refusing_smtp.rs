//! A mail server that refuses every recipient for good (`550 5.1.1`, no
//! such mailbox): what a real one answers for an address that does not
//! exist. MailDev accepts every message and cannot be told to refuse one,
//! so a relay's dead letter is tested against this small SMTP dialogue
//! (RFC 5321's greeting, `EHLO`, `MAIL`, `RCPT`, `RSET`, `NOOP`, `QUIT`).

use anyhow::Result;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running refusing SMTP server on loopback.
#[derive(Debug)]
pub struct RefusingSmtp {
    addr: std::net::SocketAddr,
    refused: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RefusingSmtp {
    /// Starts one on a free port.
    pub async fn start() -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let refused = Arc::new(AtomicUsize::new(0));
        let counter = refused.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(converse(stream, counter.clone()));
            }
        });
        Ok(Self {
            addr,
            refused,
            task,
        })
    }

    /// `smtp://127.0.0.1:PORT`, for `--smtp-url`.
    pub fn smtp_url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// How many recipients it refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for RefusingSmtp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn converse(stream: TcpStream, refused: Arc<AtomicUsize>) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"220 refusing.test ESMTP\r\n").await?;
    while let Some(line) = lines.next_line().await? {
        let verb = line
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        let reply: &[u8] = match verb.as_str() {
            "EHLO" | "HELO" => b"250 refusing.test\r\n",
            "MAIL" | "RSET" | "NOOP" => b"250 2.0.0 OK\r\n",
            "RCPT" => {
                refused.fetch_add(1, Ordering::SeqCst);
                b"550 5.1.1 no such mailbox here\r\n"
            }
            "DATA" => b"503 5.5.1 no valid recipients\r\n",
            "QUIT" => {
                write.write_all(b"221 2.0.0 bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 5.5.2 command not recognized\r\n",
        };
        write.write_all(reply).await?;
    }
    Ok(())
}

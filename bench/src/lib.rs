//! What the benchmark's tools share: a plain HTTP/1.1 connection to the
//! server under test, with Nagle off (each tool's requests are small).

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// One HTTP/1.1 connection to the server under test.
pub type Sender = SendRequest<Full<Bytes>>;

/// Connects to `addr` (`HOST:PORT`); the connection is driven by a task of
/// its own. Panics if the server cannot be reached: a benchmark without
/// its server has nothing to measure.
pub async fn connect(addr: &str) -> Sender {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    sender
}

//! Every request that is not a fresh event stream: the connection goes to hyper's HTTP/1
//! server (keep-alive, bodies, pipelining), which first re-reads the bytes the connection
//! layer already took.

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tower_service::Service;

use super::TimedIo;
use super::rewind::Rewind;
use crate::config::Config;
use crate::conn::ConnInfo;

/// hyper's smallest allowed read buffer limit.
const HYPER_MIN_BUF: usize = 8192;

/// Serves `stream` with hyper until the client is done or, after shutdown begins, the
/// request in flight is answered.
pub async fn serve(
    router: Router,
    config: &Config,
    stream: TcpStream,
    already_read: Bytes,
    info: ConnInfo,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = info.peer;
    let io = TimedIo::new(stream, config.sse.write_timeout, info.state.clone());
    let io = TokioIo::new(Rewind::new(already_read, io));
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(info.clone()));
        router.clone().call(request)
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.limits.header_read_timeout)
        .max_buf_size(config.limits.max_header_bytes.max(HYPER_MIN_BUF))
        .serve_connection(io, service);
    tokio::pin!(connection);
    let shutting_down = async {
        let _ = shutdown.wait_for(|down| *down).await;
    };
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = shutting_down => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, %peer, "connection ended with an error");
    }
}

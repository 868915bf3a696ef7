//! A loopback TCP proxy whose connections can be cut, as a network failure would, while the
//! server behind it keeps running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy on `127.0.0.1` relaying every connection to one upstream port.
pub struct TcpProxy {
    port: u16,
    accept: JoinHandle<()>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    /// While false, new connections are closed at once (the network stays down).
    relaying: Arc<AtomicBool>,
}

impl TcpProxy {
    /// A proxy relaying to `127.0.0.1:<upstream>`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let port = listener.local_addr().expect("proxy address").port();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let relaying = Arc::new(AtomicBool::new(true));
        let accept = tokio::spawn({
            let (connections, relaying) = (connections.clone(), relaying.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if !relaying.load(Ordering::SeqCst) {
                        continue;
                    }
                    let relay = tokio::spawn(async move {
                        if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", upstream)).await
                        {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                    lock(&connections).push(relay);
                }
            }
        });
        Self {
            port,
            accept,
            connections,
            relaying,
        }
    }

    /// The proxy's address as a NATS URL.
    pub fn nats_url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Drops every relayed connection; new ones are accepted again.
    pub fn cut(&self) {
        for relay in lock(&self.connections).drain(..) {
            relay.abort();
        }
    }

    /// Drops every relayed connection and refuses new ones until [`TcpProxy::resume`].
    pub fn cut_and_hold(&self) {
        self.relaying.store(false, Ordering::SeqCst);
        self.cut();
    }

    /// Relays new connections again after [`TcpProxy::cut_and_hold`].
    pub fn resume(&self) {
        self.relaying.store(true, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

fn lock(
    connections: &Mutex<Vec<JoinHandle<()>>>,
) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
    connections.lock().unwrap_or_else(|e| e.into_inner())
}

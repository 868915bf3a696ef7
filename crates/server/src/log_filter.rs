//! Which events of the libraries underneath the hub's logger may show, whatever the log
//! filter (`SLUICE_LOG`) enables.

use tracing::{Level, Metadata};

/// Whether an event may be shown at all:
///
/// - async-nats's connector (target `async_nats::connector`) prints server addresses and
///   connection details at debug and trace level, with any credentials they carry: its events
///   below info are dropped;
/// - the `h2` library warns once for every HTTP/2 connection a client makes reset too many
///   streams (a rapid-reset attack sets that rate): its warnings are dropped, and the hub
///   reports those connections itself, one line a minute, counted in
///   `sluice_http2_connection_errors_total{reason="enhance_your_calm"}`.
///
/// Every other event may be shown.
pub fn may_log(metadata: &Metadata<'_>) -> bool {
    shown(*metadata.level(), metadata.target())
}

fn shown(level: Level, target: &str) -> bool {
    let nats_details = level > Level::INFO && target.starts_with("async_nats::connector");
    let client_paced = level <= Level::WARN && (target == "h2" || target.starts_with("h2::"));
    !nats_details && !client_paced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_client_paced_warnings_are_never_shown() {
        assert!(!shown(Level::DEBUG, "async_nats::connector"));
        assert!(shown(Level::INFO, "async_nats::connector"));
        assert!(!shown(Level::WARN, "h2::proto::streams::recv"));
        assert!(shown(Level::DEBUG, "h2::proto::streams::recv"));
        assert!(shown(Level::WARN, "h2_stream"), "another crate's target");
        assert!(shown(Level::WARN, "sluice_server::net::upstream"));
    }
}

//! What every client and publisher of one run shares ([`Run`]): set up by `run`, read by
//! `publisher` and `subscriber`.

use hyper::header::HeaderValue;

use crate::Hub;
use crate::http::Target;
use crate::multiplex::Multiplex;
use crate::payload::PayloadShape;
use crate::stats::Stats;

/// What every client and publisher of one run shares.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) target: Target,
    /// The shared connections of HTTP/2 event streams; `None` over HTTP/1.1.
    pub(crate) multiplex: Option<Multiplex>,
    pub(crate) hub: Hub,
    pub(crate) stats: Stats,
    /// Tags this run's messages, so messages of anyone else are told apart.
    pub(crate) run_id: String,
    pub(crate) topic_names: Vec<String>,
    pub(crate) payload: PayloadShape,
    /// The publishers' `Authorization` (a Mercure publisher's token), marked sensitive.
    pub(crate) authorization: Option<HeaderValue>,
    /// The clients' start option ([`Config::from`](crate::Config::from)), percent-encoded.
    pub(crate) from: Option<String>,
}

impl Run {
    /// The path and query of client subscriptions to topic number `topic`.
    pub(crate) fn events_path(&self, topic: usize) -> String {
        let path = self.hub.events_path(&self.topic_names[topic]);
        match &self.from {
            Some(from) => format!("{path}&from={from}"),
            None => path,
        }
    }
}

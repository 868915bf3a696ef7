//! The payload every publisher of a run sends: a JSON document padded to about the requested
//! size, which clients read back in `message`.

/// The shape of every published message: a JSON object padded to about the requested size.
#[derive(Debug, Clone)]
pub struct PayloadShape {
    pad: String,
}

/// The payload's size without padding, with the widest run id, `n` and `sent_us`.
const UNPADDED: usize = r#"{"run":"0123456789abcdef","n":18446744073709551615,"sent_us":18446744073709551615,"pad":""}"#.len();

impl PayloadShape {
    /// Payloads of about `bytes` bytes (never smaller than the fields they must carry).
    pub fn new(bytes: usize) -> Self {
        Self {
            pad: "x".repeat(bytes.saturating_sub(UNPADDED)),
        }
    }

    /// The published document for message `n` of run `run` on `topic`, sent at `sent_us`:
    /// `{"topic":…,"payload":{"run":…,"n":…,"sent_us":…,"pad":…}}`, a sluice hub's
    /// `POST /publish` body.
    pub fn body(&self, topic: &str, run: &str, n: u64, sent_us: u64) -> String {
        format!(
            r#"{{"topic":"{topic}","payload":{{"run":"{run}","n":{n},"sent_us":{sent_us},"pad":"{}"}}}}"#,
            self.pad
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_is_json_with_a_padded_payload() {
        let shape = PayloadShape::new(200);
        let body = shape.body("bench.1", "0123456789abcdef", 7, 1234);
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(value["topic"], "bench.1");
        assert_eq!(value["payload"]["n"], 7);
        assert_eq!(value["payload"]["sent_us"], 1234);
        let payload = value["payload"].to_string();
        assert!(
            (150..=200).contains(&payload.len()),
            "{} bytes",
            payload.len()
        );
        assert!(PayloadShape::new(1).pad.is_empty());
    }
}

//! Test bed for sluice: real `nats-server` and `sluice` processes on loopback ports, a strict
//! Server-Sent Events client and a headless Chromium driver.

//! Sends and receives with a deadline, for the pipeline suites: a chain that stops taking
//! requests without refusing them, or stops answering, fails the test with a message
//! instead of hanging it (and CI with it).

#![allow(dead_code)]

use std::time::Duration;

use bytemuck::Pod;
use gyre::{Error, Kernel};

/// How long a send or a receive may wait.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `send_blocking` that fails the test after [`LIMIT`] without a free slot.
pub fn send<Req: Pod, Resp: Pod>(k: &Kernel<Req, Resp>, req: Req) -> Result<(), Error> {
    match k.send_timeout(req, LIMIT) {
        Err(Error::Timeout { .. }) => {
            panic!("no free slot within {LIMIT:?}: the chain stopped taking requests")
        }
        r => r,
    }
}

/// `recv_blocking` that fails the test after [`LIMIT`] without a reply.
pub fn recv<Req: Pod, Resp: Pod>(k: &Kernel<Req, Resp>) -> Result<Resp, Error> {
    match k.recv_timeout(LIMIT) {
        Err(Error::Timeout { .. }) => {
            panic!("no reply within {LIMIT:?}: the chain stopped answering")
        }
        r => r,
    }
}

/// Sends `0..n` from another thread and receives the `n` outcomes on this one, in
/// order, every send and receive with a deadline.
pub fn stream<Resp: Pod>(k: &Kernel<u64, Resp>, n: u64) -> Vec<Result<Resp, Error>> {
    let producer = {
        let k = k.clone();
        std::thread::spawn(move || {
            for x in 0..n {
                send(&k, x).expect("send");
            }
        })
    };
    let got = (0..n).map(|_| recv(k)).collect();
    producer.join().expect("producer");
    got
}

//! Arbitrary bytes as both directions of a WebSocket session (with and without permessage-deflate)
//! through the realtime analysis. Besides "never panics", it checks that where the network cut the
//! bytes (with equal stamps) does not change the result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_analysis::realtime::{DeflateParams, Direction, RealtimeAnalyzer, RealtimeContext, RealtimeLimits};

fn run(data: &[u8], deflate: bool, cut: Option<usize>) -> String {
    let limits = RealtimeLimits { max_message_bytes: 4096, max_inflated_bytes: 1 << 20, ..RealtimeLimits::default() };
    let mut a = RealtimeAnalyzer::new(RealtimeContext { deflate: deflate.then(DeflateParams::default), limits });
    // The first byte picks where the client's bytes end and the server's begin.
    let split = data.first().map_or(0, |b| usize::from(*b) * data.len() / 256);
    let (client, server) = data.split_at(split.min(data.len()));
    for (direction, bytes) in [(Direction::ClientToServer, client), (Direction::ServerToClient, server)] {
        match cut {
            Some(step) => bytes.chunks(step.max(1)).for_each(|c| a.push(direction, 1, c)),
            None => a.push(direction, 1, bytes),
        }
    }
    serde_json::to_string(&a.finish(2)).expect("serializes")
}

fuzz_target!(|data: &[u8]| {
    for deflate in [false, true] {
        let whole = run(data, deflate, None);
        let step = data.get(1).map_or(1, |b| usize::from(*b % 17) + 1);
        assert_eq!(whole, run(data, deflate, Some(step)));
    }
});

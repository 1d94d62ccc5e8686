//! A network namespace joined to the test's own by a veth pair, for real peers that need a network
//! path of their own: aiortc's ICE never offers a loopback address, and Chromium skips loopback
//! candidates, so a WebRTC peer and the browser meet on the pair's two addresses. nftables rules
//! inside the namespace impair that path (this kernel has no `tc netem`).
//!
//! Every pair has a unique name and subnet per test run; the namespace (and with it both ends of
//! the pair and its rules) is deleted when the [`NetnsPair`] drops, also when the test panics.
//! Needs root, `ip` (iproute2) and, for impairments, `nft` (`scripts/setup.sh test`).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct NetnsPair {
    /// The namespace.
    pub name: String,
    /// The address of the test's own end, and of the namespace's end.
    pub host_ip: String,
    pub ns_ip: String,
    host_if: String,
}

/// Runs `program args`, panicking with its output when it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (scripts/setup.sh test installs it): {e}"));
    assert!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl NetnsPair {
    /// Creates the namespace and the pair, both ends up, with a /30 of 10.0.0.0/8 per pair.
    pub fn create() -> NetnsPair {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        // Interface names have at most 15 bytes.
        let tag = format!("{:x}", (pid << 8 | n) ^ (nanos >> 12));
        let tag = &tag[tag.len().saturating_sub(8)..];
        let name = format!("tt-rtc-{tag}");
        let host_if = format!("ttr{tag}a");
        let ns_if = format!("ttr{tag}b");
        let key = pid.wrapping_mul(2654435761).wrapping_add(n.wrapping_mul(40503)) ^ nanos;
        let (b, c) = (16 + (key >> 8) % 224, (key % 64) * 4);
        let host_ip = format!("10.{b}.{c}.1");
        let ns_ip = format!("10.{b}.{c}.2");
        run("ip", &["netns", "add", &name]);
        // From here on, Drop cleans up whatever exists.
        let pair = NetnsPair { name, host_ip, ns_ip, host_if };
        run("ip", &["link", "add", &pair.host_if, "type", "veth", "peer", "name", &ns_if]);
        run("ip", &["link", "set", &ns_if, "netns", &pair.name]);
        run("ip", &["addr", "add", &format!("{}/30", pair.host_ip), "dev", &pair.host_if]);
        run("ip", &["link", "set", &pair.host_if, "up"]);
        run("ip", &["-n", &pair.name, "addr", "add", &format!("{}/30", pair.ns_ip), "dev", &ns_if]);
        run("ip", &["-n", &pair.name, "link", "set", &ns_if, "up"]);
        run("ip", &["-n", &pair.name, "link", "set", "lo", "up"]);
        pair
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// Drops `drop` of every `of_every` RTP and RTCP packets the namespace sends (the first
    /// `drop` of each run, counted by nftables' `numgen inc`: the same packets every run). RTP and
    /// RTCP are told from the rest by their first byte, 128–191 (RFC 7983); STUN (ICE) and DTLS
    /// (the handshake, and the data channel over SCTP) pass, so the loss is on the media alone and
    /// the connection comes up as it does without it.
    pub fn drop_media_out(&self, drop: u32, of_every: u32) {
        assert!(drop < of_every, "drop {drop} of every {of_every}");
        let rules = format!(
            "add table inet tokentap_loss; \
             add chain inet tokentap_loss out {{ type filter hook output priority 0; policy accept; }}; \
             add rule inet tokentap_loss out meta l4proto udp @th,64,8 128-191 numgen inc mod {of_every} < {drop} drop"
        );
        run("ip", &["netns", "exec", &self.name, "nft", &rules]);
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the other end.
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Command::new("ip").args(["link", "del", &self.host_if]).output();
    }
}

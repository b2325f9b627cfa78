//! A port for a rendezvous that another process will bind a moment later.

use std::io;
use std::net::{IpAddr, TcpListener};

use rand::Rng;

/// Linux's default ephemeral range, used when `/proc` does not say.
const EPHEMERAL_DEFAULT: (u16, u16) = (32768, 60999);
/// Ports below this are left alone (well-known and registered services cluster there).
const LOWEST: u16 = 10000;
const TRIES: usize = 64;

/// A port on `host` that was free a moment ago, for a rendezvous that a child process binds
/// next (`parma launch`, tests that start nodes as processes).
///
/// Binding port 0 and releasing it would hand out a port from the kernel's ephemeral range,
/// which the kernel gives again to the next `bind(0)` or outgoing connection on the host, so
/// the child may find it taken. The port here is drawn at random outside that range (read
/// from `/proc/sys/net/ipv4/ip_local_port_range` where there is one) and checked by binding
/// it: only a process that names the same port explicitly can take it in between. Falls back
/// to a kernel-chosen port when none of the tries binds.
pub fn free_rendezvous_port(host: IpAddr) -> io::Result<u16> {
    let (lo, hi) = ephemeral_range();
    let mut rng = rand::thread_rng();
    for _ in 0..TRIES {
        let port = if lo > LOWEST {
            rng.gen_range(LOWEST..lo)
        } else {
            rng.gen_range(hi.saturating_add(1)..=u16::MAX)
        };
        if port != 0 && TcpListener::bind((host, port)).is_ok() {
            return Ok(port);
        }
    }
    TcpListener::bind((host, 0))?.local_addr().map(|a| a.port())
}

fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| parse_range(&s))
        .unwrap_or(EPHEMERAL_DEFAULT)
}

fn parse_range(s: &str) -> Option<(u16, u16)> {
    let mut it = s.split_whitespace().map(str::parse::<u16>);
    let (lo, hi) = (it.next()?.ok()?, it.next()?.ok()?);
    (lo <= hi).then_some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_is_outside_the_ephemeral_range_and_bindable() {
        let (lo, hi) = ephemeral_range();
        for _ in 0..20 {
            let p = free_rendezvous_port(IpAddr::from([127, 0, 0, 1])).unwrap();
            assert!(p < lo || p > hi, "{p} is in {lo}..={hi}");
            assert!(p >= LOWEST.min(lo), "{p}");
            TcpListener::bind(("127.0.0.1", p)).unwrap();
        }
    }

    #[test]
    fn ranges_parse_or_are_ignored() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("1024 65535"), Some((1024, 65535)));
        assert_eq!(parse_range("60999 32768"), None);
        assert_eq!(parse_range("x y"), None);
        assert_eq!(parse_range(""), None);
    }
}

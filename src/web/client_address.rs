//! Where a request comes from, for what is counted per client (the
//! sign-in throttle, the password pool's shares): the TCP peer's address,
//! unless the peer is a reverse proxy the node is told to trust
//! (`[web] trusted_proxies`); then the `X-Forwarded-For` entries are read
//! from the right, and the first one that is not a trusted proxy is the
//! client. A peer not trusted cannot name another address by the header.

use std::net::{IpAddr, Ipv4Addr};

use actix_web::HttpRequest;
use ipnet::IpNet;

/// The reverse proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct ClientAddresses {
    trusted: Vec<IpNet>,
}

impl ClientAddresses {
    /// Trusting the proxies of `list` (addresses or CIDR networks).
    pub fn new(list: &[String]) -> Result<Self, String> {
        let trusted = list
            .iter()
            .map(|p| {
                p.parse::<IpNet>()
                    .or_else(|_| p.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!(
                            "web.trusted_proxies: {p:?} is neither an address nor a network (e.g. 10.0.0.5, 10.0.0.0/8)"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { trusted })
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&addr))
    }

    /// The client address of `req`.
    pub fn of(&self, req: &HttpRequest) -> IpAddr {
        let peer = req
            .peer_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let forwarded: Vec<&str> = req
            .headers()
            .get_all("x-forwarded-for")
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        self.client_of(peer, &forwarded)
    }

    /// The client behind `peer`, which forwarded `forwarded` (the entries
    /// of its `X-Forwarded-For`, leftmost first).
    fn client_of(&self, peer: IpAddr, forwarded: &[&str]) -> IpAddr {
        let mut client = peer.to_canonical();
        for entry in forwarded.iter().rev() {
            if !self.trusts(client) {
                break;
            }
            match entry.trim().parse::<IpAddr>() {
                Ok(addr) => client = addr.to_canonical(),
                // Not an address: the last trusted hop is all that is known.
                Err(_) => break,
            }
        }
        client
    }
}

/// What `addr` is counted as, per client: itself for IPv4, its /64 for
/// IPv6 (one host is commonly given a whole /64, so counting each of its
/// addresses apart would let it go round every count).
pub fn counted_as(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let none = ClientAddresses::default();
        assert_eq!(
            none.client_of(ip("192.0.2.1"), &["203.0.113.9"]),
            ip("192.0.2.1")
        );
        let proxies = ClientAddresses::new(&["10.0.0.0/8".into(), "192.0.2.1".into()]).unwrap();
        // The proxy's client; an address the client claimed to the left is
        // not believed (the client is no trusted proxy).
        assert_eq!(
            proxies.client_of(ip("192.0.2.1"), &["1.1.1.1", "203.0.113.9"]),
            ip("203.0.113.9")
        );
        // Through two proxies.
        assert_eq!(
            proxies.client_of(ip("10.1.2.3"), &["203.0.113.9", "192.0.2.1"]),
            ip("203.0.113.9")
        );
        // A peer no one trusts.
        assert_eq!(
            proxies.client_of(ip("198.51.100.7"), &["203.0.113.9"]),
            ip("198.51.100.7")
        );
        assert_eq!(
            proxies.client_of(ip("::ffff:192.0.2.1"), &["garbage"]),
            ip("192.0.2.1")
        );
        // An IPv6 host counts as its /64.
        assert_eq!(
            counted_as(ip("2001:db8:1:2:aaaa::1")),
            counted_as(ip("2001:db8:1:2:bbbb::9"))
        );
        assert_eq!(counted_as(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_ne!(counted_as(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(counted_as(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        let err = ClientAddresses::new(&["proxy.local".into()]).unwrap_err();
        assert!(err.contains("proxy.local"), "{err}");
    }
}

//! `listen` and `admin_listen`: the two addresses tokentap binds.

use std::net::{SocketAddr, ToSocketAddrs};

use super::{invalid, ConfigError};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8788";

/// The proxy's address and the admin API's (`None`: "off").
pub(super) struct Listeners {
    pub(super) listen: SocketAddr,
    pub(super) admin_listen: Option<SocketAddr>,
}

impl Listeners {
    /// Parses both addresses (the defaults when not given) and checks that they differ.
    pub(super) fn validate(listen: Option<String>, admin_listen: Option<String>) -> Result<Self, ConfigError> {
        let listen = parse_addr("listen", &listen.unwrap_or_else(|| DEFAULT_LISTEN.into()))?;
        let admin_text = admin_listen.unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.into());
        let admin_listen = if admin_text == "off" { None } else { Some(parse_addr("admin_listen", &admin_text)?) };
        if admin_listen == Some(listen) && listen.port() != 0 {
            return Err(invalid("admin_listen", "must differ from `listen`"));
        }
        Ok(Self { listen, admin_listen })
    }
}

fn parse_addr(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    // Allow "localhost:8787" and similar names, resolved once at start.
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs.next().ok_or_else(|| invalid(key, format!("{text:?} resolves to no address"))),
        Err(e) => Err(invalid(key, format!("{text:?} is not HOST:PORT ({e})"))),
    }
}

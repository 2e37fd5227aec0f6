//! The loopback-only rule for every address the load generator talks to:
//! payrail, provider-sim, the webhook sink and Postgres must all be on this
//! machine, whatever is typed.

use std::net::{IpAddr, ToSocketAddrs};

use reqwest::Url;

/// True for 127.0.0.0/8, ::1 and an IPv4-mapped loopback address.
pub fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Accepts an `http`/`https` URL whose host is a loopback address, or
/// `localhost` when it resolves only to loopback addresses. The load must
/// never leave this machine, whatever is typed.
pub fn check_loopback_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{raw:?}: only http and https are supported"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{raw:?}: credentials in the URL are not supported"));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => is_loopback_ip(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_loopback_ip(ip.into()),
        Some(url::Host::Domain(name)) => {
            localhost_is_loopback(name, url.port_or_known_default().unwrap_or(80))
        }
        None => false,
    };
    if loopback {
        Ok(url)
    } else {
        Err(format!(
            "{raw:?} is not a loopback address; only 127.0.0.0/8, [::1] and localhost are allowed"
        ))
    }
}

/// `localhost` (any case) whose every resolved address is loopback; a hosts
/// file could point it elsewhere. `localhost.` is refused: the fully
/// qualified form skips the hosts file and asks DNS, which may answer anything.
fn localhost_is_loopback(name: &str, port: u16) -> bool {
    if !name.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match (name, port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| is_loopback_ip(a.ip()))
        }
        Err(_) => false,
    }
}

/// Accepts a Postgres URL whose every host is loopback or a Unix socket.
pub fn check_loopback_database(raw: &str) -> Result<(), String> {
    let config: tokio_postgres::Config = raw
        .parse()
        .map_err(|e| format!("not a Postgres connection string: {e}"))?;
    let hosts = config.get_hosts();
    if hosts.is_empty() {
        return Err("names no host".into());
    }
    for host in hosts {
        match host {
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(_) => {}
            tokio_postgres::config::Host::Tcp(name) => {
                let ok = match name.parse::<IpAddr>() {
                    Ok(ip) => is_loopback_ip(ip),
                    Err(_) => localhost_is_loopback(name, 5432),
                };
                if !ok {
                    return Err(format!(
                        "host {name:?} is not a loopback address; only 127.0.0.0/8, ::1 and localhost are allowed"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls_are_accepted() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3/",
            "https://127.0.0.1",
            "http://[::1]:9099",
            "http://[::ffff:127.0.0.1]:80",
            "http://127.1:8080",
        ] {
            assert!(check_loopback_url(ok).is_ok(), "{ok} refused");
        }
    }

    #[test]
    fn localhost_is_accepted_when_it_resolves_to_loopback() {
        // Every sane hosts file maps it to loopback; this guards the name match.
        assert!(check_loopback_url("http://localhost:8080").is_ok());
        assert!(check_loopback_url("http://LOCALHOST:8080").is_ok());
        assert!(check_loopback_url("http://localhost.:8080").is_err());
    }

    #[test]
    fn other_hosts_are_refused() {
        for bad in [
            "http://10.0.0.1:8080",
            "http://192.168.1.10",
            "http://172.16.0.1",
            "http://8.8.8.8",
            "http://0.0.0.0:8080",
            "http://[::]:8080",
            "http://[fe80::1]",
            "http://example.com",
            "http://localhost.example.com",
            "http://127.0.0.1.nip.io",
            "ftp://127.0.0.1",
            "http://user:pw@127.0.0.1",
            "127.0.0.1:8080",
            "not a url",
        ] {
            assert!(check_loopback_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn database_urls_must_be_loopback_too() {
        assert!(check_loopback_database("postgres://postgres@127.0.0.1:5432/db").is_ok());
        assert!(check_loopback_database("host=localhost user=postgres").is_ok());
        assert!(check_loopback_database("host=/var/run/postgresql user=postgres").is_ok());
        assert!(check_loopback_database("postgres://u@db.example.com/db").is_err());
        assert!(check_loopback_database("host=10.1.1.1 user=u").is_err());
        assert!(check_loopback_database("host=127.0.0.1,10.1.1.1 user=u").is_err());
        assert!(check_loopback_database("nonsense=").is_err());
    }
}

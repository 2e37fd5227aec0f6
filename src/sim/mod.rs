//! Interface stub; the provider simulator lands from its own branch.

use std::net::SocketAddr;

/// Flags of `payrail provider-sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Listen address.
    #[arg(long, env = "PAYRAIL_SIM_LISTEN", default_value = "127.0.0.1:9090")]
    pub listen: SocketAddr,
}

/// A running simulator.
pub struct SimServer {
    addr: SocketAddr,
}

impl SimServer {
    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Starts the simulator.
pub async fn start(args: SimArgs) -> std::io::Result<SimServer> {
    Ok(SimServer { addr: args.listen })
}

/// Runs the simulator until stopped.
pub async fn run(_args: SimArgs) -> std::io::Result<()> {
    Ok(())
}

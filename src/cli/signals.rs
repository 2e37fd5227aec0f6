//! SIGINT, SIGTERM and SIGHUP (a closed terminal) all stop the server the
//! same way: gracefully, in-flight work finishing, then the caller's own
//! clean-up (`payrail dev` stops provider-sim and Postgres after it).

use actix_web::dev::ServerHandle;
use tokio::signal::unix::{signal, SignalKind};

/// Stops `server` gracefully on the first SIGINT, SIGTERM or SIGHUP.
pub fn stop_gracefully_on_signals(server: ServerHandle, then: impl FnOnce() + 'static) {
    actix_web::rt::spawn(async move {
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            tracing::warn!("cannot listen for signals; stop with SIGKILL");
            return;
        };
        let name = tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        };
        tracing::info!("{name}: stopping (requests in flight finish first)");
        server.stop(true).await;
        then();
    });
}

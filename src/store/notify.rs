//! LISTEN/NOTIFY on a connection of its own (a pooled one could be recycled
//! under the listener), reconnecting whenever it breaks.

use std::time::Duration;

use futures::StreamExt;
use tokio_postgres::AsyncMessage;

use super::{Store, StoreError};

/// How long a listener waits before reconnecting after its connection broke.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// What a listener hears.
#[derive(Debug)]
pub enum Heard<'a> {
    /// LISTEN is in effect (again). Anything sent while nobody listened was
    /// missed, so the caller should catch up now.
    Listening,
    /// One notification's payload.
    Notification(&'a str),
}

impl Store {
    /// Listens on `channel` until the connection breaks.
    pub async fn listen(
        &self,
        channel: &'static str,
        on: &mut impl FnMut(Heard<'_>),
    ) -> Result<(), StoreError> {
        let connect = self.pg_config.connect(tokio_postgres::NoTls);
        let (client, mut connection) = tokio::time::timeout(self.op_timeout, connect)
            .await
            .map_err(|_| StoreError::Timeout(self.op_timeout))??;
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        // `channel` is one of our constants, never input: an identifier
        // cannot be a bind parameter.
        let listen_sql = format!("LISTEN {channel}");
        let listen = client.batch_execute(&listen_sql);
        futures::pin_mut!(listen);
        let mut listening = false;
        loop {
            tokio::select! {
                done = &mut listen, if !listening => {
                    done?;
                    listening = true;
                    on(Heard::Listening);
                }
                message = messages.next() => match message {
                    Some(Ok(AsyncMessage::Notification(n))) => on(Heard::Notification(n.payload())),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => return Ok(()),
                },
            }
        }
    }

    /// Listens on `channel` for as long as the returned future is polled,
    /// reconnecting after every break (a Postgres restart, say).
    pub async fn listen_forever(self, channel: &'static str, mut on: impl FnMut(Heard<'_>)) {
        loop {
            if let Err(e) = self.listen(channel, &mut on).await {
                tracing::warn!(channel, error = %e, "listener lost its connection; reconnecting");
            }
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    }
}

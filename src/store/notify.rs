//! LISTEN/NOTIFY on a connection of its own (a pooled one could be recycled
//! under the listener), reconnecting whenever it breaks. A listener can
//! acknowledge each notification on a second channel once its handler has
//! run, which is how a revocation knows every process has applied it.

use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio_postgres::AsyncMessage;

use super::{Store, StoreError};

/// What a listener needs, and all it holds: how to open a connection of its
/// own, and `--db-timeout`.
#[derive(Clone)]
pub struct Listener {
    pg_config: tokio_postgres::Config,
    op_timeout: Duration,
}

impl Store {
    /// LISTEN/NOTIFY for this database, on connections of its own.
    pub fn listener(&self) -> Listener {
        Listener {
            pg_config: self.pg_config.clone(),
            op_timeout: self.op_timeout,
        }
    }
}

/// How long a listener waits before reconnecting after its connection broke.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// Unread payloads a subscription holds before its connection task waits.
const SUBSCRIPTION_BUFFER: usize = 256;

/// What a listener hears.
#[derive(Debug)]
pub enum Heard<'a> {
    /// LISTEN is in effect (again). Anything sent while nobody listened was
    /// missed, so the caller should catch up now.
    Listening,
    /// One notification's payload.
    Notification(&'a str),
    /// The connection broke; nothing is heard until the next `Listening`.
    Lost,
}

/// The `application_name` of a listener's connection, so that a notifier can
/// count the processes listening on `channel` in `pg_stat_activity`.
pub(super) fn listener_name(channel: &str) -> String {
    format!("payrail-listen-{channel}")
}

impl Listener {
    /// A connection outside the pool, opened within `--db-timeout`: a
    /// listener must not be recycled or handed to anyone else.
    async fn connect_own(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<
        (
            tokio_postgres::Client,
            tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
        ),
        StoreError,
    > {
        tokio::time::timeout(self.op_timeout, config.connect(tokio_postgres::NoTls))
            .await
            .map_err(|_| StoreError::Timeout(self.op_timeout))?
            .map_err(StoreError::from)
    }

    /// Listens on `channel` until the connection breaks. With `ack_channel`,
    /// every notification's payload is sent back on it after `on` returned.
    pub async fn listen(
        &self,
        channel: &'static str,
        ack_channel: Option<&'static str>,
        on: &mut impl FnMut(Heard<'_>),
    ) -> Result<(), StoreError> {
        let mut config = self.pg_config.clone();
        config.application_name(listener_name(channel));
        let (client, mut connection) = self.connect_own(&config).await?;
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        // `channel` is one of our constants, never input: an identifier
        // cannot be a bind parameter.
        let listen_sql = format!("LISTEN {channel}");
        let listen = client.batch_execute(&listen_sql);
        futures::pin_mut!(listen);
        let mut listening = false;
        let mut acks = FuturesUnordered::new();
        loop {
            tokio::select! {
                done = &mut listen, if !listening => {
                    done?;
                    listening = true;
                    on(Heard::Listening);
                }
                Some(sent) = acks.next() => {
                    let _: Result<u64, tokio_postgres::Error> = sent;
                    sent?;
                }
                message = messages.next() => match message {
                    Some(Ok(AsyncMessage::Notification(n))) => {
                        on(Heard::Notification(n.payload()));
                        if let Some(ack) = ack_channel {
                            let payload = n.payload().to_owned();
                            let client = &client;
                            acks.push(async move {
                                client.execute("SELECT pg_notify($1, $2)", &[&ack, &payload]).await
                            });
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => return Ok(()),
                },
            }
        }
    }

    /// A short-lived subscription: LISTEN is in effect when this returns, and
    /// notifications arrive on the receiver (at most `SUBSCRIPTION_BUFFER`
    /// unread) until it is dropped or the connection breaks, each as the
    /// sending backend's process id and the payload.
    pub async fn subscribe(
        &self,
        channel: &'static str,
    ) -> Result<tokio::sync::mpsc::Receiver<(i32, String)>, StoreError> {
        let (client, mut connection) = self.connect_own(&self.pg_config).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(SUBSCRIPTION_BUFFER);
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        let listen_sql = format!("LISTEN {channel}");
        let listen = client.batch_execute(&listen_sql);
        // The connection must be driven for LISTEN to complete.
        let listened = async {
            futures::pin_mut!(listen);
            loop {
                tokio::select! {
                    done = &mut listen => return done,
                    message = messages.next() => if message.is_none() {
                        return listen.await;
                    },
                }
            }
        };
        tokio::time::timeout(self.op_timeout, listened)
            .await
            .map_err(|_| StoreError::Timeout(self.op_timeout))??;
        tokio::spawn(async move {
            let _client = client;
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message {
                    if tx
                        .send((n.process_id(), n.payload().to_owned()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        });
        Ok(rx)
    }

    /// Listens on `channel` for as long as the returned future is polled,
    /// reconnecting after every break (a Postgres restart, say).
    pub async fn listen_forever(
        self,
        channel: &'static str,
        ack_channel: Option<&'static str>,
        mut on: impl FnMut(Heard<'_>),
    ) {
        loop {
            if let Err(e) = self.listen(channel, ack_channel, &mut on).await {
                tracing::warn!(channel, error = %e, "listener lost its connection; reconnecting");
            }
            on(Heard::Lost);
            tokio::time::sleep(RECONNECT_DELAY).await;
        }
    }
}

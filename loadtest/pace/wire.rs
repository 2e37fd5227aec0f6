//! HTTP/1.1 on one kept-alive TCP connection, reduced to what payrail-pace
//! needs: write a prepared `POST /transfers`, read the status line, the
//! headers and a `Content-Length` body. No pipelining: one request at a time.

use std::io::{self, Write as _};
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Most bytes of one answer's head; payrail's are a few hundred.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Most bytes of one answer's body; a transfer is well under 1 KiB.
const BODY_BYTES_MAX: usize = 1024 * 1024;
/// Most headers of one answer.
const HEADERS_MAX: usize = 32;

/// The parts of `POST /transfers` that are the same for every request.
pub struct Request {
    head: String,
    run_id: String,
}

impl Request {
    /// A template for `host`, authorized by `api_key`, with keys and bodies
    /// marked with `run_id`.
    pub fn new(host: &str, api_key: &str, run_id: &str) -> Self {
        Request {
            head: format!(
                "POST /transfers HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
            ),
            run_id: run_id.to_owned(),
        }
    }

    /// Request `index`: its own key, and a body the size of wrk's and
    /// payrail-loadtest's (a description and two metadata entries), so the
    /// stored answer is as large as in their rows.
    fn write(&self, index: u64, out: &mut Vec<u8>) {
        out.clear();
        let run = &self.run_id;
        let body = format!(
            r#"{{"amount":{},"currency":"USD","source_account":"pace_src_{}","destination_account":"pace_dst_{}","description":"pace {run}-{index}","metadata":{{"run":"{run}","intent":"{index}"}}}}"#,
            1 + index % 1_000_000,
            index % 1000,
            index % 64,
        );
        // Writing to a Vec cannot fail.
        let _ = write!(
            out,
            "{}Idempotency-Key: {run}-{index}\r\nContent-Length: {}\r\n\r\n{body}",
            self.head,
            body.len()
        );
    }
}

/// One kept-alive connection to the server.
pub struct Connection {
    stream: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
    closed: bool,
}

impl Connection {
    /// Connects to the first of `addrs` that accepts (`localhost` may
    /// resolve to `::1` first while the server listens on 127.0.0.1), with
    /// Nagle off: a request is written in one piece and must not wait for
    /// an ACK.
    pub async fn open(addrs: &[SocketAddr]) -> io::Result<Connection> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(Connection {
                        stream,
                        out: Vec::with_capacity(1024),
                        buf: Vec::with_capacity(4096),
                        closed: false,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The server's last answer said this connection ends with it
    /// (`Connection: close`, or HTTP/1.0 without `keep-alive`).
    pub fn closed_by_server(&self) -> bool {
        self.closed
    }

    /// Sends request `index` and reads its whole answer; returns the status.
    /// A connection the server closed before any byte of the answer (an
    /// idle kept-alive connection it timed out) fails with
    /// [`is_closed_before_answer`] true: the request may be sent again on
    /// a new connection, since its key makes a second attempt safe.
    pub async fn exchange(&mut self, request: &Request, index: u64) -> io::Result<u16> {
        request.write(index, &mut self.out);
        self.buf.clear();
        if let Err(e) = self.stream.write_all(&self.out).await {
            return Err(closed_before_answer(e));
        }
        let (status, head_len, body_len) = loop {
            if let Err(e) = self.fill().await {
                return Err(if self.buf.is_empty() {
                    closed_before_answer(e)
                } else {
                    e
                });
            }
            let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
            let mut answer = httparse::Response::new(&mut headers);
            match answer.parse(&self.buf) {
                Ok(httparse::Status::Complete(head_len)) => {
                    let status = answer.code.unwrap_or(0);
                    // HTTP/1.0 closes after each answer unless told otherwise.
                    let mut closes = answer.version == Some(0);
                    let mut body_len = None;
                    for h in answer.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            body_len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok());
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            return Err(invalid("a chunked answer (only Content-Length is read)"));
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            for token in h.value.split(|&b| b == b',') {
                                let token = token.trim_ascii();
                                if token.eq_ignore_ascii_case(b"close") {
                                    closes = true;
                                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                                    closes = false;
                                }
                            }
                        }
                    }
                    let body_len: usize =
                        body_len.ok_or_else(|| invalid("an answer without Content-Length"))?;
                    if body_len > BODY_BYTES_MAX {
                        return Err(invalid(&format!(
                            "an answer body over {BODY_BYTES_MAX} bytes"
                        )));
                    }
                    self.closed = closes;
                    break (status, head_len, body_len);
                }
                Ok(httparse::Status::Partial) if self.buf.len() < HEAD_BYTES_MAX => {}
                Ok(httparse::Status::Partial) => {
                    return Err(invalid(&format!(
                        "an answer head over {HEAD_BYTES_MAX} bytes"
                    )))
                }
                Err(e) => return Err(invalid(&format!("an answer that is not HTTP/1.x: {e}"))),
            }
        };
        while self.buf.len() < head_len + body_len {
            self.fill().await?;
        }
        if self.buf.len() > head_len + body_len {
            return Err(invalid(
                "bytes after the answer, with no request outstanding",
            ));
        }
        Ok(status)
    }

    /// Reads what has arrived onto the buffer; the end of the stream is an
    /// error, since an answer is outstanding.
    async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(4096);
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        Ok(())
    }
}

/// The kind that marks a connection closed before any byte of an answer.
const CLOSED_BEFORE_ANSWER: io::ErrorKind = io::ErrorKind::ConnectionAborted;

fn closed_before_answer(e: io::Error) -> io::Error {
    io::Error::new(
        CLOSED_BEFORE_ANSWER,
        format!("the connection ended before an answer began: {e}"),
    )
}

/// True for an error of [`Connection::exchange`] on a connection that
/// ended before the answer began.
pub fn is_closed_before_answer(e: &io::Error) -> bool {
    e.kind() == CLOSED_BEFORE_ANSWER
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn a_request_is_one_whole_post_with_its_own_key_and_a_json_body() {
        let request = Request::new("127.0.0.1:8080", "k_secret", "run7");
        let mut out = Vec::new();
        request.write(42, &mut out);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut headers);
        let httparse::Status::Complete(head_len) = parsed.parse(&out).unwrap() else {
            panic!("incomplete request head");
        };
        assert_eq!(
            (parsed.method, parsed.path),
            (Some("POST"), Some("/transfers"))
        );
        let header = |name: &str| {
            let h = parsed.headers.iter().find(|h| h.name == name).unwrap();
            std::str::from_utf8(h.value).unwrap().to_owned()
        };
        assert_eq!(header("Idempotency-Key"), "run7-42");
        assert_eq!(header("Authorization"), "Bearer k_secret");
        let body = &out[head_len..];
        assert_eq!(header("Content-Length"), body.len().to_string());
        let json: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(json["amount"], 43);
        assert_eq!(json["metadata"]["intent"], "42");

        request.write(43, &mut out);
        assert!(std::str::from_utf8(&out)
            .unwrap()
            .contains("Idempotency-Key: run7-43\r\n"));
    }

    /// A server that answers each request with `answers[i]`, written in
    /// pieces of `piece` bytes.
    async fn server(answers: Vec<&'static [u8]>, piece: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            for answer in answers {
                let _ = socket.read(&mut buf).await.unwrap();
                for chunk in answer.chunks(piece) {
                    socket.write_all(chunk).await.unwrap();
                    socket.flush().await.unwrap();
                    tokio::task::yield_now().await;
                }
            }
        });
        addr
    }

    #[tokio::test]
    async fn answers_arriving_in_pieces_are_read_whole_one_after_the_other() {
        let addr = server(
            vec![
                b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nhello",
                b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\nconnection: Upgrade, close\r\n\r\n",
            ],
            3,
        )
        .await;
        let request = Request::new("h", "k", "r");
        let mut conn = Connection::open(&[addr]).await.unwrap();
        assert_eq!(conn.exchange(&request, 1).await.unwrap(), 201);
        assert!(!conn.closed_by_server());
        assert_eq!(conn.exchange(&request, 2).await.unwrap(), 409);
        assert!(conn.closed_by_server());
        // The server is gone now: however the end shows (EOF, reset, broken
        // pipe), it ended before an answer began.
        let err = conn.exchange(&request, 3).await.unwrap_err();
        assert!(is_closed_before_answer(&err), "{err}");
    }

    #[tokio::test]
    async fn http_1_0_closes_unless_kept_alive_and_an_answer_cut_short_is_not_a_stale_connection() {
        let addr = server(
            vec![
                b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
                b"HTTP/1.0 201 Created\r\nContent-Length: 0\r\n\r\n",
            ],
            64,
        )
        .await;
        let request = Request::new("h", "k", "r");
        let mut conn = Connection::open(&[addr]).await.unwrap();
        assert_eq!(conn.exchange(&request, 1).await.unwrap(), 200);
        assert!(!conn.closed_by_server());
        assert_eq!(conn.exchange(&request, 2).await.unwrap(), 201);
        assert!(conn.closed_by_server());

        let addr = server(
            vec![b"HTTP/1.1 201 Created\r\ncontent-length: 10\r\n\r\nhalf"],
            64,
        )
        .await;
        let mut conn = Connection::open(&[addr]).await.unwrap();
        let err = conn.exchange(&request, 1).await.unwrap_err();
        assert!(!is_closed_before_answer(&err), "{err}");
    }

    #[tokio::test]
    async fn an_answer_it_cannot_frame_is_an_error() {
        for answer in [
            &b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            b"HTTP/1.1 201 Created\r\n\r\n",
            b"HTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\nab",
            b"SMTP ready\r\n\r\n",
        ] {
            let addr = server(vec![answer], answer.len()).await;
            let mut conn = Connection::open(&[addr]).await.unwrap();
            let err = conn
                .exchange(&Request::new("h", "k", "r"), 1)
                .await
                .unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::InvalidData,
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }
}

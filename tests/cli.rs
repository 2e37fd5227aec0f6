//! The command line as a newcomer meets it: `payrail dev` in a fresh folder,
//! the admin commands next to it, and messages that say what to do.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::admin_url;

fn payrail(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_payrail"));
    c.current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    c
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "payrail-cli-{name}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    // As root, Postgres runs as `postgres` and must reach its data folder.
    let _ = Command::new("chmod")
        .args(["755", dir.to_str().unwrap()])
        .status();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `payrail dev` running in `dir`, with what its banner said.
struct Dev {
    child: Child,
    banner: String,
    api: String,
    /// Lines printed after the banner.
    later: std::sync::mpsc::Receiver<String>,
}

impl Dev {
    fn start(dir: &Path) -> Dev {
        let (api_port, sim_port, sink_port) = (free_port(), free_port(), free_port());
        let mut child = payrail(dir)
            .args([
                "dev",
                "--listen",
                &format!("127.0.0.1:{api_port}"),
                "--sim-listen",
                &format!("127.0.0.1:{sim_port}"),
                "--sink-listen",
                &format!("127.0.0.1:{sink_port}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut banner = String::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(90))
                .expect("payrail dev printed its banner");
            banner.push_str(&line);
            banner.push('\n');
            if line.contains("Idempotency-Key") {
                break;
            }
        }
        Dev {
            child,
            banner,
            api: format!("http://127.0.0.1:{api_port}"),
            later: rx,
        }
    }

    /// The next line printed that contains `text`, within `within`.
    fn line_later(&self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.later.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(_) => panic!("payrail dev printed no line with {text:?}"),
            }
        }
    }

    fn line(&self, label: &str) -> String {
        self.banner
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} in {}", self.banner))
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }

    fn signal(&self, sig: &str) {
        assert!(Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success());
    }

    fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "payrail dev did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn postmaster_alive(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join(".payrail-dev/postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next().map(str::to_owned))
        .is_some_and(|pid| Path::new(&format!("/proc/{}", pid.trim())).exists())
}

fn stop_leftover_postgres(dir: &Path) {
    if let Ok(text) = std::fs::read_to_string(dir.join(".payrail-dev/postmaster.pid")) {
        if let Some(pid) = text.lines().next() {
            let _ = Command::new("kill").args(["-QUIT", pid.trim()]).status();
        }
    }
}

#[actix_web::test]
async fn payrail_dev_keeps_its_demo_key_prints_its_database_and_stops_on_sighup() {
    let dir = temp_dir("dev");
    let mut dev = Dev::start(&dir);
    let key = dev.line("demo API key:");
    let database = dev.line("database:");
    assert!(
        database.starts_with("postgres://postgres@127.0.0.1:"),
        "{database}"
    );
    assert!(dev
        .banner
        .contains(&format!("export DATABASE_URL={database}")));
    assert!(
        dev.banner.contains("/stats"),
        "says how to watch provider-sim"
    );

    // A second payrail dev in the same folder says that one runs.
    let second = payrail(&dir)
        .args([
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--sim-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already running"),
        "{second:?}"
    );

    // The banner's transfer succeeds, and its signed webhook is printed.
    let res = reqwest::Client::new()
        .post(format!("{}/transfers", dev.api))
        .bearer_auth(&key)
        .header("Idempotency-Key", "5f1c2a4e-8b8e-4c55-9d1e-3f0a7c9b2d11")
        .json(&serde_json::json!({"amount": 1500, "currency": "USD",
            "source_account": "acc_alice", "destination_account": "acc_bob"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    let id = res.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let webhook = dev.line_later("webhook received", Duration::from_secs(30));
    assert!(
        webhook.contains("transfer.succeeded") && webhook.contains(&id),
        "{webhook}"
    );

    // Admin commands next to it find its database by themselves.
    let created = payrail(&dir)
        .args(["client", "create", "--name", "shop"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{created:?}");
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(
        stderr.contains("payrail dev"),
        "says which database it used: {stderr}"
    );
    assert!(
        !stderr.contains("INFO") && !stderr.contains("NOTICE"),
        "no log noise: {stderr}"
    );
    let listed = payrail(&dir).args(["outbox", "list"]).output().unwrap();
    assert!(listed.status.success());
    assert!(
        !String::from_utf8_lossy(&listed.stderr).trim().is_empty(),
        "says the outbox is empty"
    );

    // Closing the terminal (SIGHUP) stops everything, Postgres included.
    dev.signal("-HUP");
    assert!(dev.wait(Duration::from_secs(30)).success());
    assert!(!postmaster_alive(&dir), "Postgres was stopped");

    // The next run prints the same key, and it still works.
    let dev = Dev::start(&dir);
    assert_eq!(dev.line("demo API key:"), key);
    let res = reqwest::Client::new()
        .get(format!("{}/transfers", dev.api))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    drop(dev);
    stop_leftover_postgres(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_payrail_dev_leaves_nothing_the_next_one_trips_over() {
    let dir = temp_dir("stale");
    let mut dev = Dev::start(&dir);
    dev.signal("-KILL");
    let _ = dev.wait(Duration::from_secs(10));
    assert!(postmaster_alive(&dir), "SIGKILL leaves Postgres running");
    let dev = Dev::start(&dir);
    assert!(dev.line("demo API key:").starts_with("prk_"));
    drop(dev);
    stop_leftover_postgres(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn messages_say_what_to_do() {
    let dir = temp_dir("msg");
    // A transfer id that is not one.
    let out = payrail(&dir)
        .args(["outbox", "retry", "abc", "--database-url", &admin_url()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected a transfer id (a UUID"), "{err}");

    // No database anywhere.
    let out = payrail(&dir).args(["outbox", "list"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--database-url"),
        "{err}"
    );

    // A database that does not answer: the cause once, not three times.
    let port = free_port();
    let out = payrail(&dir)
        .args([
            "outbox",
            "list",
            "--database-url",
            &format!("postgres://postgres@127.0.0.1:{port}/x"),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");

    // A busy port names the address and the flag.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = payrail(&dir)
        .args(["serve", "--listen", &addr, "--database-url", &admin_url()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&addr) && err.contains("--listen"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_and_docs_stand_on_their_own() {
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["dev", "--help"],
        &["client", "create", "--help"],
        &["provider-sim", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_payrail"))
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("SPEC") && !text.contains("shared/"),
            "{args:?}: {text}"
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    docs.extend(
        std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            // docs/console holds the console's screenshots.
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(
            !text.contains("SPEC") && !text.contains("../shared"),
            "{} points outside the repository",
            doc.display()
        );
    }
    assert!(root.join("LICENSE").exists());
}

#[actix_web::test]
async fn an_outbox_retry_from_the_command_line_is_audited_with_who_ran_it() {
    let app = common::spawn_app().await;
    app.stop().await;
    let db = app.db().await;
    let id = uuid::Uuid::now_v7();
    db.execute(
        "WITH t AS (
            INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency,
                                   source_account, destination_account, created_at, updated_at)
            VALUES ($1, $2, 'parked', 'pending', 100, 'EUR', 'acc_a', 'acc_b', now(), now())
            RETURNING id, client_id)
         INSERT INTO outbox (transfer_id, client_id, attempts, last_error, dead_at)
         SELECT id, client_id, 20, 'provider answered 503', now() FROM t",
        &[&id, &app.client_id],
    )
    .await
    .unwrap();
    let dir = temp_dir("audit");
    let out = payrail(&dir)
        .env("USER", "jane")
        .args([
            "outbox",
            "retry",
            &id.to_string(),
            "--database-url",
            &app.database_url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audit = db
        .query(
            "SELECT operator_id IS NULL, operator_name, action, rows_touched FROM operator_audit WHERE target = $1",
            &[&id.to_string()],
        )
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "one audit row, in the retry's transaction");
    let row = &audit[0];
    assert!(row.get::<_, bool>(0), "no operator account");
    assert_eq!(row.get::<_, String>(1), "cli:jane");
    assert_eq!(row.get::<_, String>(2), "outbox.retry");
    assert_eq!(row.get::<_, i64>(3), 1);
    // A second retry finds no dead row: refused, and nothing audited.
    let out = payrail(&dir)
        .args([
            "outbox",
            "retry",
            &id.to_string(),
            "--database-url",
            &app.database_url,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let n: i64 = db
        .query_one("SELECT count(*) FROM operator_audit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

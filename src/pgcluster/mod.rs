//! A private PostgreSQL cluster from the local PostgreSQL binaries, for
//! `payrail dev` and for tests that must stop and start their own Postgres.
//! As root, the server runs as the `postgres` user (Postgres refuses root).

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Why a cluster could not be set up or driven.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No PostgreSQL server binaries were found.
    #[error("no PostgreSQL binaries found (set PAYRAIL_PG_BIN or install the postgresql package)")]
    NoBinaries,
    /// A PostgreSQL tool failed.
    #[error("{command} failed: {stderr}")]
    Tool {
        /// The command line.
        command: String,
        /// What it printed.
        stderr: String,
    },
    /// A program it needs is not installed.
    #[error("{0} was not found")]
    Missing(String),
    /// File system or process error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// How to stop the server (`pg_ctl -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Waits for nothing, rolls back open transactions, checkpoints.
    Fast,
    /// Kills backends without a checkpoint; the next start runs crash recovery.
    Immediate,
}

/// A cluster in a data folder of its own, listening on 127.0.0.1.
#[derive(Debug, Clone)]
pub struct PgCluster {
    bin_dir: PathBuf,
    data_dir: PathBuf,
    port: u16,
    as_postgres_user: bool,
}

impl PgCluster {
    /// Prepares `data_dir` (runs `initdb` unless it already holds a cluster)
    /// to listen on `port`, or on a free port when `port` is 0.
    /// `durable = false` turns fsync and full-page writes off, for throwaway
    /// test clusters only: that loses data on an OS crash or power cut, not
    /// when the server process dies. `synchronous_commit` stays on either
    /// way, because off it would let an immediate shutdown or a SIGKILL drop
    /// commits that were already acknowledged, and the tests kill Postgres
    /// on purpose and assert that nothing acknowledged is lost.
    pub fn init(data_dir: &Path, port: u16, durable: bool) -> Result<Self, ClusterError> {
        let bin_dir = find_bin_dir()?;
        let as_postgres_user = std::fs::metadata("/proc/self")?.uid() == 0;
        std::fs::create_dir_all(data_dir)?;
        let data_dir = data_dir.canonicalize()?;
        let port = if port == 0 { free_port()? } else { port };
        let cluster = Self {
            bin_dir,
            data_dir,
            port,
            as_postgres_user,
        };
        if !cluster.data_dir.join("PG_VERSION").exists() {
            cluster.hand_to_postgres()?;
            cluster.run(
                "initdb",
                &[
                    "-D",
                    cluster.data(),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            )?;
            let conf = format!(
                "\n# payrail private cluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n\
                 max_connections = 200\nfsync = {}\nsynchronous_commit = on\nfull_page_writes = {}\n",
                on(durable), on(durable)
            );
            let path = cluster.data_dir.join("postgresql.conf");
            let mut text = std::fs::read_to_string(&path)?;
            text.push_str(&conf);
            std::fs::write(&path, text)?;
        }
        Ok(cluster)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&self) -> Result<(), ClusterError> {
        let log = self.data_dir.join("server.log");
        let port = format!("-p {}", self.port);
        self.run(
            "pg_ctl",
            &[
                "-D",
                self.data(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                &port,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )?;
        Ok(())
    }

    /// Stops the server and waits until it is gone.
    pub fn stop(&self, mode: StopMode) -> Result<(), ClusterError> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        self.run(
            "pg_ctl",
            &["-D", self.data(), "-m", mode, "-w", "-t", "60", "stop"],
        )?;
        Ok(())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection URL for database `db` as the `postgres` superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    fn data(&self) -> &str {
        self.data_dir.to_str().unwrap_or_default()
    }

    /// Postgres must own its data folder; as root, give it to `postgres`.
    fn hand_to_postgres(&self) -> Result<(), ClusterError> {
        if self.as_postgres_user {
            check(
                Command::new("chown")
                    .args(["-R", "postgres:postgres", self.data()])
                    .output()?,
                "chown",
            )?;
            check(
                Command::new("chmod").args(["700", self.data()]).output()?,
                "chmod",
            )?;
        }
        Ok(())
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<Output, ClusterError> {
        let program = self.bin_dir.join(tool);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        // pg_ctl's server inherits these; a closed stdin keeps it detached.
        let output = cmd
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound if self.as_postgres_user => ClusterError::Missing(format!(
                    "runuser (from util-linux), needed to run {tool} as the postgres user because payrail runs as root"
                )),
                std::io::ErrorKind::NotFound => ClusterError::Missing(program.display().to_string()),
                _ => ClusterError::Io(e),
            })?;
        check(output, &format!("{tool} {}", args.join(" ")))
    }
}

fn on(flag: bool) -> &'static str {
    if flag {
        "on"
    } else {
        "off"
    }
}

fn check(output: Output, command: &str) -> Result<Output, ClusterError> {
    if output.status.success() {
        Ok(output)
    } else {
        Err(ClusterError::Tool {
            command: command.to_owned(),
            stderr: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stderr),
                String::from_utf8_lossy(&output.stdout)
            ),
        })
    }
}

/// `PAYRAIL_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin` (Debian's
/// layout), else `pg_config --bindir`.
pub fn find_bin_dir() -> Result<PathBuf, ClusterError> {
    if let Some(dir) = std::env::var_os("PAYRAIL_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .map_err(|_| ClusterError::NoBinaries)?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && dir.join("initdb").exists() {
        Ok(dir)
    } else {
        Err(ClusterError::NoBinaries)
    }
}

/// A port that was free a moment ago (the kernel picks it).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

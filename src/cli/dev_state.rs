//! What `payrail dev` remembers in its folder between runs: the demo
//! client (so its API key stays the same and the README's curl line keeps
//! replaying), and while it runs, its pid and database URL (so admin
//! commands find the database and a second `payrail dev` says that one runs).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The state file sits beside the dev folder (`.payrail-dev.json`), not in
/// it: the folder is Postgres's data directory, which `initdb` wants empty.
const STATE_SUFFIX: &str = ".json";

/// The contents of the state file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DevState {
    /// The running `payrail dev`, if any.
    pub pid: Option<u32>,
    /// Its database.
    pub database_url: String,
    /// Its API.
    pub api_url: String,
    /// The demo client, kept across runs.
    pub demo_client_id: Option<Uuid>,
    /// The demo client's API key (the file is readable by its owner only).
    pub demo_api_key: Option<String>,
    /// The demo client's webhook endpoint, pointing at the dev sink.
    #[serde(default)]
    pub webhook_endpoint_id: Option<Uuid>,
    /// Its signing secret, so the sink can check signatures across runs.
    #[serde(default)]
    pub webhook_secret: Option<String>,
}

fn path(dir: &Path) -> PathBuf {
    let mut p = dir.as_os_str().to_owned();
    p.push(STATE_SUFFIX);
    PathBuf::from(p)
}

/// The state left by an earlier run, if any.
pub fn load(dir: &Path) -> Option<DevState> {
    let text = std::fs::read_to_string(path(dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the state, readable by its owner only (it holds an API key).
pub fn save(dir: &Path, state: &DevState) -> std::io::Result<()> {
    let mut tmp = path(dir).into_os_string();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(serde_json::to_string_pretty(state)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(tmp, path(dir))
}

/// The state of a `payrail dev` running from `dir` now.
pub fn running(dir: &Path) -> Option<DevState> {
    load(dir).filter(|s| s.pid.is_some_and(is_payrail))
}

/// True when `pid` is a live `payrail` process (a pid may be reused).
pub fn is_payrail(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("payrail"))
}

/// The postmaster of a Postgres still running on `data_dir`, if any.
pub fn postmaster(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_only_its_owner_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("payrail-dev-state-{}", Uuid::new_v4().simple()));
        assert!(load(&dir).is_none());
        let state = DevState {
            pid: Some(std::process::id()),
            database_url: "postgres://x".into(),
            demo_api_key: Some("prk_x".into()),
            ..DevState::default()
        };
        save(&dir, &state).unwrap();
        let mode = std::fs::metadata(path(&dir)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load(&dir).unwrap().demo_api_key.as_deref(), Some("prk_x"));
        assert!(!dir.exists(), "the state sits beside the folder, not in it");
        std::fs::remove_file(path(&dir)).unwrap();
    }
}

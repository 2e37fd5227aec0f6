//! `payrail-loadtest`: drives `POST /transfers` like a fleet of retrying
//! mobile apps and then checks payrail's invariants (the README's load-testing section).
//!
//! Exit status: 0 when every invariant held, 1 when one broke (or the run hit
//! its hard deadline), 2 when the flags were wrong or the run could not start.

mod args;
mod ceiling;
mod client;
mod intent;
mod judge;
mod load;
mod loopback;
mod mix;
mod record;
mod report;
mod run;
mod scenario;
mod verify;
mod webhooks;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::args::Args;

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = args.validate() {
        eprintln!("payrail-loadtest: {e}");
        return ExitCode::from(2);
    }
    start_watchdog(args.hard_deadline());

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payrail-loadtest: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let json = args.json;
    let report = match runtime.block_on(run::run(args)) {
        Ok(report) => report,
        Err(run::SetupError(e)) => {
            eprintln!("payrail-loadtest: {e:#}");
            return ExitCode::from(2);
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("payrail-loadtest: cannot serialize the report: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        print!("{}", report.to_text());
    }
    // Tasks still parked on the runtime (idle pooled connections) have no say.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(report.exit_code() as u8)
}

/// Every phase has its own bound; this is the one that holds even if a bound
/// has a bug: the process ends by itself, failing, whatever it is doing.
fn start_watchdog(after: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        eprintln!(
            "payrail-loadtest: hard deadline of {} passed; giving up",
            humantime::format_duration(after)
        );
        std::process::exit(1);
    });
}

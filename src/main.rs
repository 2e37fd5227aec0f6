use clap::Parser;

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    let cli =
        payrail::cli::Cli::parse_from(payrail::cli::args_with_renamed_env(std::env::args_os()));
    // The long-running parts log what they do; one-shot admin commands
    // print their result and stay quiet otherwise (RUST_LOG still wins).
    payrail::telemetry::init_logging(if cli.command.is_long_running() {
        "info"
    } else {
        "warn"
    });
    match payrail::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payrail: {}", payrail::cli::describe(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

use clap::Parser;

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    payrail::telemetry::init_logging();
    match payrail::cli::run(payrail::cli::Cli::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payrail: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

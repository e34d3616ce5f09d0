fn main() -> std::process::ExitCode {
    knative_ha_webhook::cli::main()
}

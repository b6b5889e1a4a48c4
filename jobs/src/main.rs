fn main() -> std::process::ExitCode {
    silt_jobs::cli::main()
}

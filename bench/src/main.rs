// The allocator and its options: see `silt_jobs::silt_allocator`.
silt_jobs::silt_allocator!();

fn main() -> std::process::ExitCode {
    silt_bench::cli::run().unwrap_or_else(|e| silt_jobs::cli::failure(&e))
}

//! What the kernel reports of a process under `/proc` (Linux; `None` where there is no procfs).

/// A number from `/proc/<pid>/status` (`pid` a process id or `self`) without its unit:
/// `VmRSS`, `VmHWM` and `RssFile` are in kB, `Threads` is a count.
pub(crate) fn status_field(pid: &str, name: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(':')?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_resident_set_and_threads() {
        let rss_kb = super::status_field("self", "VmRSS").expect("VmRSS of this process");
        assert!(rss_kb > 0.0, "VmRSS {rss_kb} kB");
        let threads = super::status_field("self", "Threads").expect("Threads of this process");
        assert!(threads >= 1.0, "{threads} threads");
        assert_eq!(super::status_field("self", "NoSuchField"), None);
    }
}

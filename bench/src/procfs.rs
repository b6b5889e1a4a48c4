//! What the kernel reports of a process under `/proc`: memory and thread figures, CPU seconds
//! (Linux; `None` or NaN where there is no procfs).

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

/// User and system CPU seconds of `/proc/<pid>` (all its threads, also those that ended).
pub(crate) fn cpu_s(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| parse_stat(&s).1)
        .unwrap_or(f64::NAN)
}

/// Every live thread of this process: its name and CPU seconds.
pub(crate) fn own_threads() -> Vec<(String, f64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .map(|stat| parse_stat(&stat))
        .collect()
}

/// The thread or process name and its CPU seconds (utime + stime) from a `stat` line.
pub(crate) fn parse_stat(stat: &str) -> (String, f64) {
    // The name is in parentheses and may hold spaces; the fields after it are plain.
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return (String::new(), f64::NAN);
    };
    let name = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    let cpu_s = match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / clock_ticks_per_s(),
        _ => f64::NAN,
    };
    (name, cpu_s)
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_resident_set_and_threads() {
        let rss_kb = status_field("self", "VmRSS").expect("VmRSS of this process");
        assert!(rss_kb > 0.0, "VmRSS {rss_kb} kB");
        let threads = status_field("self", "Threads").expect("Threads of this process");
        assert!(threads >= 1.0, "{threads} threads");
        assert_eq!(status_field("self", "NoSuchField"), None);
    }

    #[test]
    fn a_stat_line_gives_the_name_and_cpu_seconds() {
        // A thread name with a space and a parenthesis, as /proc writes it.
        let stat = "4242 (fjall:wor) ker) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100";
        let (name, cpu_s) = parse_stat(stat);
        assert_eq!(name, "fjall:wor) ker");
        assert!(
            (cpu_s - 300.0 / clock_ticks_per_s()).abs() < 1e-9,
            "{cpu_s}"
        );
        assert!(parse_stat("garbage").1.is_nan());
    }
}

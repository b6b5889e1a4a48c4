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

/// Nanoseconds each live thread of this process whose name starts with `prefix` ran on a CPU,
/// by thread id. Read from each thread's CPU clock, which counts up to the moment of the read
/// even while the thread runs (`schedstat` only moves at scheduler events, and `stat` counts
/// 10 ms ticks). Empty where there is no procfs.
pub(crate) fn threads_cpu_ns(prefix: &str) -> std::collections::HashMap<String, u64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Default::default();
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with(prefix))
        })
        .filter_map(|task| {
            let tid = task.file_name().to_string_lossy().into_owned();
            Some((tid.clone(), thread_cpu_ns(tid.parse().ok()?)?))
        })
        .collect()
}

/// The CPU clock of thread `tid` of this process, in ns: Linux's per-thread clock id, made as
/// glibc's `pthread_getcpuclockid` makes it (`~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED`).
fn thread_cpu_ns(tid: libc::pid_t) -> Option<u64> {
    let clock: libc::clockid_t = (!tid << 3) | 4 | 2;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `now` is; an unknown clock (a thread
    // that ended) is an error return, not undefined behaviour.
    let read = unsafe { libc::clock_gettime(clock, &mut now) };
    (read == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// CPU seconds the threads of `after` ran since `before` (two [`threads_cpu_ns`] of the same
/// prefix); a thread that ended in between is not counted.
pub(crate) fn cpu_s_between(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> f64 {
    let ns: u64 = after
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum();
    ns as f64 / 1e9
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

    /// The probe's name does not start with `silt-`: the hot-store bench's test counts every
    /// `silt-*` thread of this process as the server's, and the two tests may run together.
    #[test]
    fn a_named_thread_counts_its_own_cpu() {
        let busy = std::thread::Builder::new()
            .name("cpu-probe".into())
            .spawn(|| {
                let before = threads_cpu_ns("cpu-probe");
                // 50 ms of this thread's own CPU, however busy the machine (at most 10 s).
                let own_s = || {
                    let mut now = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    let read =
                        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
                    assert_eq!(read, 0, "this thread's CPU clock");
                    now.tv_sec as f64 + now.tv_nsec as f64 / 1e9
                };
                let (start, started) = (own_s(), std::time::Instant::now());
                while own_s() - start < 0.05
                    && started.elapsed() < std::time::Duration::from_secs(10)
                {}
                cpu_s_between(&before, &threads_cpu_ns("cpu-probe"))
            })
            .unwrap();
        let cpu_s = busy.join().unwrap();
        assert!((0.04..1.0).contains(&cpu_s), "{cpu_s} s");
        assert!(threads_cpu_ns("no-thread-is-named-so").is_empty());
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

//! Clients that fluss-rs 1.0 kills: its sender panics (`cluster.rs`:
//! `get_table_path_by_id(..).unwrap()`) when it refreshes a table's or partition's metadata
//! after it re-initialized its cluster from the bootstrap server, which it does when `silt up`
//! was unreachable: the new cluster knows no table. The client's writes never resolve after
//! that. A panic hook tells which client died (by its runtime's thread name), so its workload
//! can be replaced, as an application would restart a dead writer, and the dead one's
//! unresolved writes count as refused (they may be stored, as any refused write may).
//!
//! Only the workloads that replace their clients are watched: those of partitions
//! ([`super::partitions`]) and of tables dropped and created again ([`super::recreated`]), by
//! the prefixes of their threads' names. Every other panic goes to the previous hook.

use std::collections::BTreeSet;
use std::sync::{Mutex, Once};

/// The thread name prefixes of the watched workloads.
pub(super) const PARTITION_THREADS: &str = "trial-partition-";
pub(super) const TABLE_THREADS: &str = "trial-table-";
/// Why the unresolved writes of a dead client count as refused.
pub(super) const DEAD_CLIENT: &str = "its client died: fluss-rs 1.0's sender panicked";

/// The threads on which fluss-rs panicked: their clients are dead.
static PANICKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
static PANIC_HOOK: Once = Once::new();

/// Records fluss-rs's panics on the watched workloads' threads, leaving every other panic to
/// the previous hook.
pub(super) fn watch_client_panics() {
    PANIC_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current()
                .name()
                .unwrap_or_default()
                .to_string();
            let known = info.location().is_some_and(|l| {
                l.file().contains("fluss-rs") && l.file().ends_with("src/cluster/cluster.rs")
            });
            let watched = [PARTITION_THREADS, TABLE_THREADS]
                .iter()
                .any(|p| thread.starts_with(p));
            if known && watched {
                PANICKED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(thread);
                return;
            }
            previous(info);
        }));
    });
}

/// Whether the client whose runtime's threads are named `thread` died.
pub(super) fn client_died(thread: &str) -> bool {
    PANICKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(thread)
}

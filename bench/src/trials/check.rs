//! What the hot store holds, judged against what the workload wrote.
//!
//! Log tables: an acknowledged row with no stored copy is lost; a row stored more than once is
//! duplicated (acknowledged or not: a retry must never append twice); a stored row no one
//! wrote is a phantom.
//!
//! Primary-key tables, written by several clients at once on shared keys: the order in which
//! concurrent ops were applied is unknown, but each op was applied between its issue (before
//! the client was called) and its acknowledgement (its own future resolved `Ok`). So the final
//! image of a key, found by replaying the changelog, is wrong when
//! - it is an image no op wrote (a `ver` never written to that key, or a delete's);
//! - its op was acknowledged before some other acknowledged op on that key was issued (that op
//!   was applied later, so it is the one to see);
//! - the key is absent, yet an acknowledged upsert exists that no delete can have followed (every
//!   delete on the key was acknowledged before that upsert was issued).
//!
//! Ops that were not acknowledged may or may not have been applied, at any time after their
//! issue, so they never make a final image wrong, only possible. Each op's image carries a `ver`
//! unique in the trial: an image stored twice (`+I`/`+U` with the same `ver`) is an op applied
//! twice. The changelog must also agree with itself: a `-U` or `-D` carries the image it
//! replaces.

use std::collections::{BTreeMap, HashMap};

use silt_connectors::changelog::ChangeType;

use super::workload::{PkOp, PkWrite};

/// Where a row is stored: its bucket and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Place {
    pub bucket: i32,
    pub offset: i64,
}

#[derive(Debug, Default)]
pub(super) struct LogFindings {
    /// Acknowledged ids with no stored copy.
    pub lost: Vec<i64>,
    /// Ids stored more than once, with every copy.
    pub duplicated: BTreeMap<i64, Vec<Place>>,
    /// Stored ids that were never written.
    pub phantom: Vec<(i64, Place)>,
}

impl LogFindings {
    /// Rows stored beyond their first copy.
    pub fn extra_copies(&self) -> u64 {
        self.duplicated.values().map(|c| c.len() as u64 - 1).sum()
    }
}

/// `stored`: every row the hot store holds, `written`: every id written (true: acknowledged).
pub(super) fn check_log(stored: &[(Place, i64)], written: &HashMap<i64, bool>) -> LogFindings {
    let mut copies: HashMap<i64, Vec<Place>> = HashMap::new();
    for &(copy, id) in stored {
        copies.entry(id).or_default().push(copy);
    }
    let mut findings = LogFindings::default();
    for (&id, &acked) in written {
        if acked && !copies.contains_key(&id) {
            findings.lost.push(id);
        }
    }
    for (id, mut at) in copies {
        at.sort();
        if !written.contains_key(&id) {
            findings.phantom.push((id, at[0]));
        }
        if at.len() > 1 {
            findings.duplicated.insert(id, at);
        }
    }
    findings.lost.sort();
    findings.phantom.sort();
    findings
}

/// One record of a primary-key table's changelog.
#[derive(Debug, Clone, Copy)]
pub(super) struct Change {
    pub at: Place,
    pub key: i64,
    pub change: ChangeType,
    pub ver: Option<i64>,
}

/// A key whose final image contradicts what was acknowledged.
#[derive(Debug)]
pub(super) struct WrongKey {
    pub key: i64,
    /// The final image's `ver` and where it is stored; `None`: the key is absent.
    pub image: Option<(Option<i64>, Place)>,
    pub reason: String,
    /// The op the final image should not have hidden, when there is one.
    pub culprit: Option<PkWrite>,
}

#[derive(Debug, Default)]
pub(super) struct PkFindings {
    pub wrong: Vec<WrongKey>,
    /// Images (`ver`) stored more than once, with the key and every copy.
    pub duplicated: BTreeMap<i64, (i64, Vec<Place>)>,
    /// Changelog records that disagree with the image they replace.
    pub inconsistent: Vec<String>,
}

impl PkFindings {
    pub fn extra_copies(&self) -> u64 {
        self.duplicated
            .values()
            .map(|(_, c)| c.len() as u64 - 1)
            .sum()
    }
}

/// Records where the image of `key` with `ver` is stored; an image without a ver is not tracked.
fn add_image(images: &mut BTreeMap<i64, (i64, Vec<Place>)>, key: i64, ver: Option<i64>, at: Place) {
    if let Some(ver) = ver {
        images.entry(ver).or_insert((key, Vec::new())).1.push(at);
    }
}

/// `initial`: under hot retention, the lake's images below each bucket's log start
/// (`log_start`; all 0 without retention), where the changelog `changes` begins. A key changed
/// between its bucket's log start and the lake's offset has no such image (the lake holds its
/// newer one): its first change there is a `-U` or `-D` that carries the image it had at the log
/// start, which is then taken as its state.
pub(super) fn check_pk(
    initial: &[Change],
    changes: &[Change],
    ops: &[PkWrite],
    log_start: &BTreeMap<i32, i64>,
) -> PkFindings {
    let mut findings = PkFindings::default();
    let mut changes: Vec<&Change> = changes.iter().collect();
    changes.sort_by_key(|c| c.at);
    // The final image per key: its `ver` (None for a null `ver`) and where it is stored.
    let mut state: HashMap<i64, Option<(Option<i64>, Place)>> = HashMap::new();
    let mut images: BTreeMap<i64, (i64, Vec<Place>)> = BTreeMap::new();
    for image in initial {
        state.insert(image.key, Some((image.ver, image.at)));
        add_image(&mut images, image.key, image.ver, image.at);
    }
    for c in changes {
        let cut = log_start.get(&c.at.bucket).is_some_and(|s| *s > 0);
        let current = match state.get(&c.key) {
            None if cut && matches!(c.change, ChangeType::UpdateBefore | ChangeType::Delete) => {
                Some((c.ver, c.at))
            }
            known => known.copied().flatten(),
        };
        match c.change {
            ChangeType::UpdateBefore | ChangeType::Delete => {
                if current.map(|(ver, _)| ver) != Some(c.ver) {
                    findings.inconsistent.push(format!(
                        "key {}: {:?} at bucket {} offset {} carries ver {:?}, the key's image was {:?}",
                        c.key,
                        c.change,
                        c.at.bucket,
                        c.at.offset,
                        c.ver,
                        current.map(|(ver, _)| ver)
                    ));
                }
                if c.change == ChangeType::Delete {
                    state.insert(c.key, None);
                }
            }
            ChangeType::Insert | ChangeType::UpdateAfter | ChangeType::AppendOnly => {
                if c.change == ChangeType::Insert && current.is_some() {
                    findings.inconsistent.push(format!(
                        "key {}: +I at bucket {} offset {} over an existing image (ver {:?})",
                        c.key,
                        c.at.bucket,
                        c.at.offset,
                        current.map(|(ver, _)| ver)
                    ));
                }
                state.insert(c.key, Some((c.ver, c.at)));
                add_image(&mut images, c.key, c.ver, c.at);
            }
        }
    }
    findings.duplicated = images
        .into_iter()
        .filter(|(_, (_, copies))| copies.len() > 1)
        .collect();
    findings.wrong = wrong_keys(ops, &state);
    findings
}

/// The keys, in order, whose final image (`state`) contradicts the `ops` written to them.
fn wrong_keys(
    ops: &[PkWrite],
    state: &HashMap<i64, Option<(Option<i64>, Place)>>,
) -> Vec<WrongKey> {
    let mut by_key: HashMap<i64, Vec<&PkWrite>> = HashMap::new();
    for op in ops {
        by_key.entry(op.key).or_default().push(op);
    }
    let mut keys: Vec<i64> = by_key.keys().chain(state.keys()).copied().collect();
    keys.sort();
    keys.dedup();
    let mut wrong = Vec::new();
    for key in keys {
        let ops = by_key.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        let image = state.get(&key).copied().flatten();
        if let Some((reason, culprit)) = judge(ops, image.map(|(ver, _)| ver)) {
            wrong.push(WrongKey {
                key,
                image,
                reason,
                culprit,
            });
        }
    }
    wrong
}

/// Why the final image of a key (`Some(ver)` of the image, `None`: absent) contradicts the ops
/// written to it, if it does, and the op it should not have hidden.
fn judge(ops: &[&PkWrite], image: Option<Option<i64>>) -> Option<(String, Option<PkWrite>)> {
    let acked = |op: &&&PkWrite| op.stamp.acked_us.is_some();
    let Some(ver) = image else {
        // Absent: every acknowledged upsert needs a delete that may have come after it.
        let orphan = ops
            .iter()
            .filter(acked)
            .filter(|u| u.op != PkOp::Delete)
            .filter(|u| {
                !ops.iter().any(|d| {
                    d.op == PkOp::Delete && d.stamp.acked_us.is_none_or(|a| a > u.stamp.issued_us)
                })
            })
            .max_by_key(|u| u.stamp.issued_us)?;
        return Some((
            format!(
                "absent, but acknowledged {} (issued {} us, acked {} us) was followed by no delete",
                describe(orphan),
                orphan.stamp.issued_us,
                orphan.stamp.acked_us.unwrap_or_default()
            ),
            Some(**orphan),
        ));
    };
    let Some(ver) = ver else {
        return Some(("the image has a null ver, which no op writes".into(), None));
    };
    let Some(last) = ops.iter().find(|op| op.ver == ver) else {
        return Some((
            format!("the image has ver {ver}, never written to this key"),
            None,
        ));
    };
    if last.op == PkOp::Delete {
        return Some((
            format!("the image has ver {ver}, which a delete carried"),
            None,
        ));
    }
    let acked_at = last.stamp.acked_us?;
    let later = ops
        .iter()
        .filter(acked)
        .filter(|x| x.ver != ver && x.stamp.issued_us > acked_at)
        .max_by_key(|x| x.stamp.issued_us)?;
    Some((
        format!(
            "the image is {} (acked {acked_at} us), but acknowledged {} was issued after it, at {} us",
            describe(last),
            describe(later),
            later.stamp.issued_us
        ),
        Some(**later),
    ))
}

pub(super) fn describe(op: &PkWrite) -> String {
    format!(
        "{:?} ver {} (client {} task {})",
        op.op, op.ver, op.origin.client, op.origin.task
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trials::workload::{Origin, Stamp};

    /// An op on key 1: (ver, kind, issued µs, acked µs or -1 for never).
    type Op = (i64, PkOp, u64, i64);

    /// Replays `changes` ((offset, change, ver) on key 1) and judges it against `ops`:
    /// whether key 1 is found wrong.
    fn wrong(ops: &[Op], changes: &[(i64, ChangeType, i64)]) -> bool {
        let ops: Vec<PkWrite> = ops
            .iter()
            .map(|&(ver, op, issued_us, acked)| PkWrite {
                table: 0,
                key: 1,
                ver,
                op,
                origin: Origin { client: 0, task: 0 },
                stamp: Stamp {
                    issued_us,
                    acked_us: (acked >= 0).then_some(acked as u64),
                    refused: acked < 0,
                },
            })
            .collect();
        let changes: Vec<Change> = changes
            .iter()
            .map(|&(offset, change, ver)| Change {
                at: Place { bucket: 0, offset },
                key: 1,
                change,
                ver: Some(ver),
            })
            .collect();
        let findings = check_pk(&[], &changes, &ops, &BTreeMap::new());
        assert!(
            findings.inconsistent.is_empty(),
            "{:?}",
            findings.inconsistent
        );
        !findings.wrong.is_empty()
    }

    use ChangeType::{Delete as D, Insert as I, UpdateAfter as UA, UpdateBefore as UB};
    use PkOp::{Delete, Partial, Upsert};

    #[test]
    fn final_images_under_concurrency() {
        #[rustfmt::skip]
        let cases: &[(&[Op], &[(i64, ChangeType, i64)], bool, &str)] = &[
            (&[(1, Upsert, 0, 10)], &[(0, I, 1)], false, "the one acked upsert"),
            (&[(1, Upsert, 0, 10)], &[], true, "an acked upsert never stored"),
            (&[(1, Upsert, 0, -1)], &[], false, "an unacked upsert never stored"),
            (&[(1, Upsert, 0, 10), (2, Upsert, 20, 30)], &[(0, I, 2), (1, UB, 2), (2, UA, 1)], true, "an upsert issued after another's ack was applied before it"),
            (&[(1, Upsert, 0, 10), (2, Upsert, 5, 30)], &[(0, I, 2), (1, UB, 2), (2, UA, 1)], false, "overlapping upserts may apply in either order"),
            (&[(1, Upsert, 0, 10), (2, Partial, 20, 30)], &[(0, I, 1), (1, UB, 1), (2, UA, 2)], false, "a partial update after an upsert"),
            (&[(1, Upsert, 0, 10), (2, Delete, 20, 30)], &[(0, I, 1), (1, D, 1)], false, "an acked delete after an acked upsert"),
            (&[(1, Upsert, 0, 10), (2, Delete, 20, 30)], &[(0, I, 1)], true, "an acked delete issued after the upsert's ack was lost"),
            (&[(2, Delete, 0, 5), (1, Upsert, 10, 20)], &[(0, I, 1), (1, D, 1)], true, "a delete acked before the upsert was issued cannot follow it"),
            (&[(1, Upsert, 0, 10), (2, Delete, 5, -1)], &[(0, I, 1), (1, D, 1)], false, "an unacked delete may have been applied"),
            (&[(1, Upsert, 0, 10)], &[(0, I, 7)], true, "an image no op wrote"),
            (&[(1, Upsert, 0, 10), (2, Delete, 20, -1)], &[(0, I, 1), (1, UB, 1), (2, UA, 2)], true, "an image carrying a delete's ver"),
            (&[(1, Upsert, 0, -1), (2, Upsert, 20, 30)], &[(0, I, 2), (1, UB, 2), (2, UA, 1)], false, "an unacked upsert may land after everything"),
        ];
        for (ops, changes, expected, what) in cases {
            assert_eq!(wrong(ops, changes), *expected, "{what}");
        }
    }

    #[test]
    fn an_image_stored_twice_is_duplicated_and_the_changelog_must_agree_with_itself() {
        let change = |offset, change, ver| Change {
            at: Place { bucket: 0, offset },
            key: 1,
            change,
            ver: Some(ver),
        };
        let findings = check_pk(
            &[],
            &[
                change(0, I, 1),
                change(1, UB, 1),
                change(2, UA, 2),
                change(3, UB, 2),
                change(4, UA, 1),
            ],
            &[],
            &BTreeMap::new(),
        );
        assert_eq!(findings.duplicated.keys().collect::<Vec<_>>(), vec![&1]);
        assert!(findings.inconsistent.is_empty());
        let findings = check_pk(
            &[],
            &[change(0, I, 1), change(1, UB, 3)],
            &[],
            &BTreeMap::new(),
        );
        assert_eq!(findings.inconsistent.len(), 1);
    }

    #[test]
    fn under_hot_retention_the_lake_images_below_the_log_start_begin_the_changelog() {
        let on = |key, offset, change, ver| Change {
            at: Place { bucket: 0, offset },
            key,
            change,
            ver: Some(ver),
        };
        let log_start = BTreeMap::from([(0, 10)]);
        // Key 1's image is the lake's (changed at 3, before the start); key 2 was changed at 12,
        // after the start, so the lake holds its newer image and the changelog its old one.
        let initial = [on(1, 3, I, 7)];
        let changes = [
            on(2, 12, UB, 5),
            on(2, 13, UA, 6),
            on(1, 14, UB, 7),
            on(1, 15, UA, 8),
        ];
        let findings = check_pk(&initial, &changes, &[], &log_start);
        assert!(
            findings.inconsistent.is_empty(),
            "{:?}",
            findings.inconsistent
        );
        // The same retraction of key 1 against a different lake image is inconsistent, and so is
        // a retraction of a key with no image when nothing was cut.
        let findings = check_pk(&[on(1, 3, I, 9)], &changes, &[], &log_start);
        assert_eq!(
            findings.inconsistent.len(),
            1,
            "{:?}",
            findings.inconsistent
        );
        let findings = check_pk(&initial, &changes, &[], &BTreeMap::from([(0, 0)]));
        assert_eq!(
            findings.inconsistent.len(),
            1,
            "{:?}",
            findings.inconsistent
        );
        // An image stored in the lake below the start and again in the changelog is duplicated.
        let findings = check_pk(&initial, &[on(3, 16, I, 7)], &[], &log_start);
        assert_eq!(findings.duplicated.keys().collect::<Vec<_>>(), vec![&7]);
    }

    #[test]
    fn log_rows_lost_duplicated_and_phantom() {
        let at = |offset| Place { bucket: 0, offset };
        let written: HashMap<i64, bool> = [(1, true), (2, true), (3, false), (4, false)].into();
        let findings = check_log(&[(at(0), 1), (at(1), 1), (at(2), 4), (at(3), 9)], &written);
        assert_eq!(findings.lost, vec![2]);
        assert_eq!(findings.duplicated.keys().collect::<Vec<_>>(), vec![&1]);
        assert_eq!(findings.extra_copies(), 1);
        assert_eq!(findings.phantom, vec![(9, at(3))]);
    }
}

//! The tables a share of the seeds writes beside the random ones: partitioned tables whose
//! partitions are created, dropped and created again ([`super::partitions`]), and tables
//! dropped and created again under their name ([`super::recreated`]). Each kind has workloads
//! of its own, started after the trial's, stepped before and after each phase's fault,
//! finished together with the trial's and checked after its tables.

use std::time::Instant;

use anyhow::Result;

use super::partitions::{PartitionPlan, Partitions};
use super::recreated::{RecreatePlan, Recreated};
use super::workload::{Records, Workload};
use super::{TableSpec, Trial, TrialsOptions};

/// What a seed drew of the extra tables.
pub(super) struct ExtraPlan {
    pub partitions: Option<PartitionPlan>,
    pub recreated: Option<RecreatePlan>,
}

impl ExtraPlan {
    pub fn draw(seed: u64, phases: i32) -> ExtraPlan {
        ExtraPlan {
            partitions: PartitionPlan::draw(seed, phases),
            recreated: RecreatePlan::draw(seed, phases),
        }
    }
}

/// The extra tables of a running trial.
pub(super) struct ExtraTables {
    partitions: Option<Partitions>,
    recreated: Option<Recreated>,
    /// How many of the workloads [`ExtraTables::take_open`] took are the partitions'.
    taken_by_partitions: usize,
}

impl ExtraTables {
    /// Creates the tables of `plan` and starts writing them.
    pub async fn start(
        trial: &mut Trial<'_>,
        plan: ExtraPlan,
        epoch: Instant,
    ) -> Result<ExtraTables> {
        let partitions = match plan.partitions {
            Some(p) => Some(Partitions::start(trial, p, epoch).await?),
            None => None,
        };
        let recreated = match plan.recreated {
            Some(r) => Some(Recreated::start(trial, r, epoch).await?),
            None => None,
        };
        Ok(ExtraTables {
            partitions,
            recreated,
            taken_by_partitions: 0,
        })
    }

    /// The tables' specs (no day: the whole table), which the faults may pick.
    pub fn specs(&self) -> Vec<TableSpec> {
        let partitioned = self.partitions.iter().flat_map(|p| p.specs());
        let recreated = self.recreated.iter().flat_map(|r| r.specs());
        partitioned.chain(recreated).cloned().collect()
    }

    /// Runs the steps of `phase` that come before its fault (`before`) or after it.
    pub async fn step(&mut self, trial: &mut Trial<'_>, phase: usize, before: bool) -> Result<()> {
        if let Some(p) = self.partitions.as_mut() {
            p.step(trial, phase, before).await?;
        }
        if let Some(r) = self.recreated.as_mut() {
            r.step(trial, phase, before).await?;
        }
        Ok(())
    }

    /// The workloads still writing, taken to be finished with the trial's own, each with the
    /// thread name that tells whether its client died.
    pub fn take_open(&mut self) -> Vec<(Workload, String)> {
        let mut open = self
            .partitions
            .as_mut()
            .map(Partitions::take_open)
            .unwrap_or_default();
        self.taken_by_partitions = open.len();
        open.extend(
            self.recreated
                .as_mut()
                .map(Recreated::take_open)
                .into_iter()
                .flatten(),
        );
        open
    }

    /// What the workloads [`ExtraTables::take_open`] took wrote, in the same order.
    pub fn finished(&mut self, trial: &mut Trial<'_>, mut records: Vec<Records>) {
        let recreated = records.split_off(self.taken_by_partitions.min(records.len()));
        if let Some(p) = self.partitions.as_mut() {
            p.finished(trial, records);
        }
        if let Some(r) = self.recreated.as_mut() {
            r.finished(trial, recreated);
        }
    }

    /// Rows and ops acknowledged to the extra tables.
    pub fn acked(&self) -> u64 {
        let partitions = self.partitions.as_ref().map_or(0, Partitions::acked);
        partitions + self.recreated.as_ref().map_or(0, Recreated::acked)
    }

    /// Tests of the checker (`--plant`): see [`Partitions::plant`] and [`Recreated::plant`].
    pub async fn plant(&self, trial: &mut Trial<'_>) -> Result<()> {
        if let Some(p) = &self.partitions {
            p.plant(trial).await?;
        }
        if let Some(r) = &self.recreated {
            r.plant(trial).await?;
        }
        Ok(())
    }

    /// The checks of each kind, once the faults are over and every write resolved.
    pub async fn check(&self, trial: &mut Trial<'_>, options: &TrialsOptions) -> Result<()> {
        if let Some(p) = &self.partitions {
            p.check(trial, options).await?;
        }
        if let Some(r) = &self.recreated {
            r.check(trial, options).await?;
        }
        Ok(())
    }
}

//! What the runner drives: an implementation held to the model, generic in
//! fact. Whatever is the implementation's own (its locks, who holds them,
//! what a split op carries between its halves) is an associated type; the
//! runner only compares, counts and reports them. Device faults are reached
//! through a [`FaultPlane`] the target lends, not through the filesystem.

use std::fmt;

use ext4_model::{Errno, FileSystem, Limits, Op, Outcome, Pending};

use crate::disk::{FaultConfig, FaultEvent, SimDisk};
use crate::figure::Figure;
use crate::run::spec::RunSpec;

/// The device's fault controls, as the runner needs them.
pub trait FaultPlane {
    /// Faults met so far (every refused command counts).
    fn faults_met(&self) -> u64;
    /// The run injects faults at all.
    fn injects(&self) -> bool;
    /// Holds faults off (true) or lets them fire again (false).
    fn hold(&mut self, held: bool);
    /// From now on fire only the faults a trace arms, drawing none.
    fn script(&mut self);
    /// Starts an op's fault window; `armed` are the trace's faults for it.
    fn begin_op(&mut self, armed: Vec<FaultEvent>);
    /// The faults that fired since [`FaultPlane::begin_op`].
    fn take_fired(&mut self) -> Vec<FaultEvent>;
    /// Armed faults the op never reached, and the device commands it issued.
    fn take_unfired(&mut self) -> (Vec<FaultEvent>, u32);
}

impl FaultPlane for SimDisk {
    fn faults_met(&self) -> u64 {
        self.stats().faults.total()
    }
    fn injects(&self) -> bool {
        *self.configured_faults() != FaultConfig::NONE
    }
    fn hold(&mut self, held: bool) {
        self.hold_faults(held);
    }
    fn script(&mut self) {
        self.script_faults();
    }
    fn begin_op(&mut self, armed: Vec<FaultEvent>) {
        SimDisk::begin_op(self, armed);
    }
    fn take_fired(&mut self) -> Vec<FaultEvent> {
        self.take_fired_faults()
    }
    fn take_unfired(&mut self) -> (Vec<FaultEvent>, u32) {
        self.take_unfired_faults()
    }
}

/// Holds a filesystem (the checked image, mounted afresh) to the model.
pub type ReadBack<'a> = &'a mut dyn FnMut(&mut dyn FileSystem) -> Result<(), String>;

/// A type with no values: the lock type of a target that has no locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoLocks {}

impl fmt::Display for NoLocks {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {}
    }
}

/// What one part of a buffered read in flight did: the range it copied
/// (from where the read stood) and the bytes, or its error.
pub type ReadPart = (std::ops::Range<u64>, Result<Vec<u8>, Errno>);

/// What the runner needs of an implementation beyond [`FileSystem`].
pub trait Target: FileSystem {
    /// A lock an op may sleep on.
    type Lock: fmt::Display + fmt::Debug;
    /// Who holds a lock across the halves of a split op.
    type Holder: fmt::Debug + Clone + PartialEq;
    /// What a split op's first half leaves for its second.
    type SecondHalf: fmt::Debug;

    /// Full check of the implementation's own on-disk structures, then the
    /// checked image mounted afresh (cold caches) handed to `read_back`,
    /// which holds it to the model. It must observe, never perturb: the run
    /// goes on as if it had not looked.
    fn fsck(&mut self, read_back: ReadBack<'_>) -> Result<(), String>;
    /// Crashes the device under the filesystem and mounts it again (journal
    /// replay included). `seed` drives which unflushed writes survive.
    fn crash_and_remount(&mut self, seed: u64) -> Result<(), String>;
    /// A digest of the image, for determinism checks.
    fn image_hash(&mut self) -> u64;
    /// Labelled figures for the summary: I/O, layout.
    fn report(&mut self) -> Vec<(String, Figure)>;
    /// Writes everything back and stores the image at `path` for e2fsprogs.
    fn export_image(&mut self, path: &std::path::Path) -> Result<(), String>;
    /// Simulated time so far, in ns (0 for a target with no clock).
    fn now_ns(&self) -> u64 {
        0
    }
    /// Lets `ns` of simulated time pass with no I/O (a target with no
    /// clock ignores it).
    fn pass_time(&mut self, _ns: u64) {}
    /// Whether free memory is low enough for the reclaimer task to run.
    fn memory_low(&self) -> bool {
        false
    }
    /// One pass of the reclaimer task: frees memory, changes no file.
    fn reclaim(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Hands the flusher thread (timed write-back) to the runner's
    /// scheduler on this and every later mount: the target stops running
    /// it inside ops.
    fn run_flusher_as_task(&mut self) {}
    /// Whether a flusher step would do anything now.
    fn flusher_runnable(&self) -> bool {
        false
    }
    /// The lock the flusher's next step would sleep on.
    fn flusher_waits_for(&mut self) -> Option<Self::Lock> {
        None
    }
    /// Who holds the flusher's locks between its halves.
    fn flusher_holder(&self) -> Option<Self::Holder> {
        None
    }
    /// Runs the flusher to its next sleep. It changes no file the model
    /// sees: write-back is invisible until a crash, whose envelope allows it.
    fn flusher_step(&mut self) -> Result<FlusherDid, String> {
        Ok(FlusherDid::Idle)
    }
    /// Ends the flusher's write-back in flight, before the runner's own work.
    fn settle_flusher(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Simulated ns the target's checks spent away from the run's clock.
    fn check_ns(&self) -> u64 {
        0
    }
    /// The device's fault controls, when the target has a simulated device.
    fn faults(&mut self) -> Option<&mut dyn FaultPlane> {
        None
    }
    /// After a fault: drop the caches and mount again (faults are held).
    fn remount_after_fault(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// The runner has read the whole tree through the target (a crash
    /// check, adopting a state): forget what those reads cached, so the
    /// run goes on with the caches the workload left (a crash leaves them
    /// cold), not warmed by the harness.
    fn forget_harness_reads(&mut self) {}
    /// ENOSPC limits for the model: the target's free space at the start.
    fn space_limits(&self) -> Limits {
        Limits::default()
    }
    /// True when the target is so full that metadata the model does not
    /// count (directory and extent-tree blocks) may decide an ENOSPC.
    fn nearly_full(&self) -> bool {
        false
    }
    /// A no-fail allocation the last op could not get (a livelock), if any.
    fn take_livelock(&mut self) -> Option<String> {
        None
    }
    /// The folio the last op could not have: it answered ENOMEM, or a
    /// short count for the bytes it finished first. (Bytes done, the request.)
    fn take_out_of_memory(&mut self) -> Option<(u64, String)> {
        None
    }
    /// What `blocks` of the file at `path` hold (for the model to learn
    /// what a mapped write's folio backed). None where the target cannot
    /// tell.
    fn block_states(&mut self, _path: &str, _blocks: std::ops::Range<u64>) -> Option<ext4_model::BlockStates> {
        None
    }
    /// What lies behind the last errno the target answered, when it was
    /// more than the errno says (EIO: which structure, which check).
    fn explain_last_error(&mut self) -> Option<String> {
        None
    }
    /// True when `op` can run in two halves ([`Target::begin_split`]).
    fn splits(&self, _op: &Op) -> bool {
        false
    }
    /// The first half of a split op. Only called when [`Target::splits`].
    fn begin_split(&mut self, _op: &Op) -> Result<Self::SecondHalf, Errno> {
        Err(Errno::EINVAL)
    }
    /// The second half: the op returns.
    fn finish_split(&mut self, _half: Self::SecondHalf) -> Outcome {
        Ok(ext4_model::Reply::Done)
    }
    /// Whether a split op in flight can take effect one more part before
    /// its second half (a buffered pwrite, folio by folio; a truncate,
    /// extent by extent).
    fn has_part(&self, _half: &Self::SecondHalf) -> bool {
        false
    }
    /// Runs that part: the bytes it set out to write (empty when the write's
    /// open failed) and its answer. None when it had none to run.
    fn write_part(&mut self, _half: &mut Self::SecondHalf) -> Option<(std::ops::Range<u64>, Result<u64, Errno>)> {
        None
    }
    /// Runs the next part of a truncate in flight (extent by extent): the
    /// block where the blocks it freed begin (None when it freed none) and
    /// its answer. None when it had none to run.
    fn truncate_part(&mut self, _half: &mut Self::SecondHalf) -> Option<(Option<u64>, Result<(), Errno>)> {
        None
    }
    /// Runs the next part of a fallocate in flight (an allocating one piece
    /// by piece, a punch extent by extent): the block where the blocks it
    /// mapped end, or where those it punched out begin (None when it did
    /// neither), and its answer. None when it had none to run.
    fn fallocate_part(&mut self, _half: &mut Self::SecondHalf) -> Option<(Option<u64>, Result<(), Errno>)> {
        None
    }
    /// Runs the part of a direct write or read in flight (its bios'
    /// submission): its answer. None when it had none to run.
    fn direct_io_part(&mut self, _half: &mut Self::SecondHalf) -> Option<Result<(), Errno>> {
        None
    }
    /// Runs the next part of a buffered read in flight (a folio's copy):
    /// the bytes it copied, from where the read stood (empty when it found
    /// nothing left, or failed), and its answer. None when it had none to run.
    fn read_part(&mut self, _half: &mut Self::SecondHalf) -> Option<ReadPart> {
        None
    }
    /// The lock a second half would sleep on now (held by another split op).
    fn finish_waits_for(&mut self, _half: &Self::SecondHalf) -> Option<Self::Lock> {
        None
    }
    /// A second half that will run whole on what its name leads to now
    /// gives back first-half locks that are no longer its op's; true when
    /// it did (the engine's `Ext4::let_go_of_stale_locks` says why).
    fn let_go_of_stale_locks(&mut self, _half: &mut Self::SecondHalf) -> bool {
        false
    }
    /// The lock a first half took and holds until its second.
    fn holder(_half: &Self::SecondHalf) -> Option<Self::Holder> {
        None
    }
    /// The lock `op` would sleep on now (held by a split op in flight).
    fn waits_for(&mut self, _op: &Op) -> Option<Self::Lock> {
        None
    }
    /// Whether `op`, which would sleep on a lock now, first takes locks it
    /// then sleeps holding (its first half takes them).
    fn sleeps_holding_first_locks(&mut self, _op: &Op) -> bool {
        false
    }
    /// Locks held between calls, with their holders.
    fn locks_held(&self) -> Vec<(Self::Lock, Self::Holder)> {
        Vec::new()
    }
    /// Lock-discipline violations the target saw since the last call
    /// (order inversions, unbalanced releases), each with its stacks.
    fn lock_violations(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// What one step of the flusher task did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlusherDid {
    Idle,
    /// Woke and found inodes dirty past the expiry.
    Woke,
    /// Sleeps on one inode's write-back I/O, holding its folios' locks.
    Began,
    WroteBack,
    /// Could not go on: a lock it needs is held.
    Slept,
}

/// Builds fresh targets for a spec (the engine, or a test double).
pub trait TargetFactory {
    type Target: Target;
    fn make(&self, spec: &RunSpec) -> Result<Self::Target, String>;
}

/// A split op between its halves, on both sides.
#[derive(Debug)]
pub struct InFlight<H> {
    pub op: Op,
    /// The op's index, for reports.
    pub index: u64,
    pub model: Pending,
    pub target: H,
    /// Simulated ns its first half took.
    pub begun_ns: u64,
}

/// What the first half of a split op left.
#[derive(Debug)]
pub enum Begun<H> {
    /// The op is over (it failed, or it could not be split).
    Completed(Outcome),
    InFlight(InFlight<H>),
}

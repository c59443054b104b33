//! Why a run stopped, as plain data: which step, which op, what was seen.

use std::fmt;

use ext4_model::{Op, OpKind, Outcome, Reply};

/// The model and the target answered one op differently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    pub index: u64,
    pub op: Op,
    pub model: Outcome,
    pub actual: Outcome,
    pub why: String,
    /// What the target says lies behind its errno (which structure, which
    /// check), when it answered one.
    pub detail: Option<String>,
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    Divergence(Box<Divergence>),
    ModelInvariant { index: u64, what: String },
    TargetFsck { index: u64, what: String },
    /// The image, mounted afresh with cold caches at a full check, reads
    /// back other than the model says: what was written back is wrong.
    ReadBack { index: u64, what: String },
    Crash { index: u64, what: String },
    /// A lock held after the op that took it returned, or every task asleep.
    Lock { index: u64, op: Option<OpKind>, what: String },
    /// A no-fail allocation in `op` that reclaim could not satisfy: the
    /// kernel would spin there.
    Livelock { index: u64, op: Option<OpKind>, what: String },
    /// The reclaimer task failed after op `index`.
    Reclaim { index: u64, what: String },
    /// The flusher task's write-back failed.
    Flusher { index: u64, what: String },
    /// The model or the target panicked in `op`.
    Panic { index: u64, op: Option<Op>, message: String },
}

impl Failure {
    pub fn index(&self) -> u64 {
        match self {
            Failure::Divergence(d) => d.index,
            Failure::ModelInvariant { index, .. }
            | Failure::TargetFsck { index, .. }
            | Failure::ReadBack { index, .. }
            | Failure::Crash { index, .. }
            | Failure::Lock { index, .. }
            | Failure::Livelock { index, .. }
            | Failure::Reclaim { index, .. }
            | Failure::Flusher { index, .. }
            | Failure::Panic { index, .. } => *index,
        }
    }

    /// The kind of op the failure showed at, where it showed at one.
    pub fn op_kind(&self) -> Option<OpKind> {
        match self {
            Failure::Divergence(d) => Some(d.op.kind()),
            Failure::Lock { op, .. } | Failure::Livelock { op, .. } => *op,
            Failure::Panic { op, .. } => op.as_ref().map(Op::kind),
            Failure::ModelInvariant { .. } | Failure::TargetFsck { .. } | Failure::ReadBack { .. } | Failure::Crash { .. } | Failure::Reclaim { .. } | Failure::Flusher { .. } => None,
        }
    }

    /// Same kind of failure at the same kind of op, so shrinking keeps the
    /// same bug rather than drifting to any bug.
    pub fn same_kind(&self, other: &Failure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other) && self.op_kind() == other.op_kind()
    }
}

/// An outcome short enough for a failure report: bytes read by count, long
/// replies cut (at a character boundary: names may be any UTF-8).
pub fn brief(o: &Outcome) -> String {
    match o {
        Ok(Reply::Data(d)) => format!("Ok({} bytes)", d.len()),
        Ok(r) => {
            let s = format!("Ok({r:?})");
            match s.char_indices().nth(300) {
                Some((cut, _)) => format!("{}...", &s[..cut]),
                None => s,
            }
        }
        Err(e) => format!("Err({e:?})"),
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Divergence(d) => {
                write!(f, "divergence at op {}: {}\n  model:  {}\n  target: {}\n  why:    {}", d.index, d.op, brief(&d.model), brief(&d.actual), d.why)?;
                match &d.detail {
                    Some(detail) => write!(f, "\n  behind: {detail}"),
                    None => Ok(()),
                }
            }
            Failure::ModelInvariant { index, what } => write!(f, "model invariant broken after op {index}: {what}"),
            Failure::TargetFsck { index, what } => write!(f, "target fsck failed after op {index}: {what}"),
            Failure::ReadBack { index, what } => write!(f, "image read back after op {index} differs from the model: {what}"),
            Failure::Crash { index, what } => write!(f, "crash after op {index}: {what}"),
            Failure::Lock { index, what, .. } => write!(f, "lock discipline broken after op {index}: {what}"),
            Failure::Livelock { index, what, .. } => write!(f, "livelock in op {index}: {what}"),
            Failure::Reclaim { index, what } => write!(f, "reclaimer task failed after op {index}: {what}"),
            Failure::Flusher { index, what } => write!(f, "flusher task failed after op {index}: {what}"),
            Failure::Panic { index, op: Some(op), message } => write!(f, "panic in op {index}: {op}\n  panic:  {message}"),
            Failure::Panic { index, op: None, message } => write!(f, "panic after op {index}: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_model::Errno;

    fn divergence(op: Op) -> Failure {
        let d = Divergence { index: 3, op, model: Ok(Reply::Done), actual: Err(Errno::EIO), why: "errno".into(), detail: Some("corrupt filesystem: block bitmap of group 2".into()) };
        Failure::Divergence(Box::new(d))
    }

    #[test]
    fn same_kind_needs_the_same_op_kind_and_reports_name_the_detail() {
        let mkdir = divergence(Op::Mkdir { path: "/e".into(), perm: 0o755 });
        let other_mkdir = divergence(Op::Mkdir { path: "/f".into(), perm: 0o700 });
        let unlink = divergence(Op::Unlink { path: "/e".into() });
        assert!(mkdir.same_kind(&other_mkdir));
        assert!(!mkdir.same_kind(&unlink), "a divergence at another op kind is another bug");
        let fsck = Failure::TargetFsck { index: 1, what: "x".into() };
        assert!(fsck.same_kind(&Failure::TargetFsck { index: 9, what: "y".into() }));
        assert!(!fsck.same_kind(&mkdir));
        let text = mkdir.to_string();
        assert!(text.contains("mkdir path=\"/e\"") && text.contains("behind: corrupt filesystem: block bitmap"), "{text}");
    }
}

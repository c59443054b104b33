//! Where blocks go, for each canonical workload under each group-spreading
//! policy and block size. Review changes with `cargo insta review`; CI
//! fails on any unreviewed difference.

use ext4_sim::workloads::Workload;
use ext4_snapshots::{cell, layout, row};

fn snapshot_row(workload: Workload) {
    for (name, run) in row(workload) {
        insta::assert_snapshot!(name, layout(&run));
    }
}

#[test]
fn tree_copy() {
    snapshot_row(Workload::TreeCopy);
}

#[test]
fn stream() {
    snapshot_row(Workload::Stream);
}

#[test]
fn small_files() {
    snapshot_row(Workload::SmallFiles);
}

#[test]
fn fill() {
    snapshot_row(Workload::Fill);
}

#[test]
fn ageing() {
    snapshot_row(Workload::Ageing);
}

#[test]
fn the_policies_lay_out_differently() {
    let text = |skip, orlov| layout(&cell(Workload::TreeCopy, 4096, skip, orlov).1);
    let base = text(false, true);
    assert_ne!(base, text(true, true), "skip_block_uninit changes nothing");
    assert_ne!(base, text(false, false), "oldalloc changes nothing");
    assert_eq!(base, text(false, true), "the same seed lays out differently");
}

//! Where blocks go under each group-spreading policy. Review changes with
//! `cargo insta review`; CI fails on any unreviewed difference.

use ext4_model::MountConfig;
use ext4_snapshots::canonical_layout;

#[test]
fn layout_using_block_uninit_groups() {
    let mount = MountConfig::default();
    insta::assert_snapshot!("use_block_uninit", canonical_layout(&mount));
}

#[test]
fn layout_skipping_block_uninit_groups() {
    let mut mount = MountConfig::default();
    mount.alloc.skip_block_uninit = true;
    insta::assert_snapshot!("skip_block_uninit", canonical_layout(&mount));
}

#[test]
fn the_two_policies_lay_out_differently() {
    let mut skip = MountConfig::default();
    skip.alloc.skip_block_uninit = true;
    assert_ne!(canonical_layout(&MountConfig::default()), canonical_layout(&skip));
}

#[test]
fn layout_is_deterministic() {
    assert_eq!(canonical_layout(&MountConfig::default()), canonical_layout(&MountConfig::default()));
}

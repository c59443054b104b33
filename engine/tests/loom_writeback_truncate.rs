//! Model 4: delayed-allocation write-back racing truncate on the same
//! file: no block may stay allocated for a page truncate dropped. The twin
//! is write-back that starts its handle before taking s_writepages_rwsem,
//! the reverse of the switch's order: with a switch racing it, loom finds
//! the deadlock.

#![cfg(loom)]

mod loom_support;

use ext4_engine::locking::switch::{NoTracking, Switch, SwitchBug};
use ext4_engine::sync::lock;
use loom_support::*;

#[test]
fn delalloc_write_back_races_truncate() {
    explore("4 (delalloc write-back vs truncate)", None, || {
        let sh = Shared::new(false);
        lock(&sh.state).pages.push(Some(false));
        let w = { let sh = sh.clone(); loom::thread::spawn(move || write_back(&sh, false)) };
        truncate(&sh);
        w.join().unwrap();
        sh.assert_idle();
        let s = lock(&sh.state);
        assert!(s.pages.is_empty());
        assert_eq!(s.blocks, 0, "write-back allocated a block for a page truncate dropped");
    });
}

#[test]
fn bug_twin_write_back_taking_the_writepages_lock_after_a_handle_deadlocks_with_the_switch() {
    expect_caught("twin_write_back_inverted", "deadlock");
}

#[test]
#[ignore = "a bug twin: run, expecting failure, by bug_twin_write_back_taking_the_writepages_lock_after_a_handle_deadlocks_with_the_switch"]
fn twin_write_back_inverted() {
    loom::model(|| {
        let sh = Shared::new(true);
        lock(&sh.state).pages.push(Some(true));
        let w = { let sh = sh.clone(); loom::thread::spawn(move || write_back(&sh, true)) };
        let sw = Switch { inode: &sh.inode, fs: &sh.fs, ino: 12, bug: SwitchBug::None };
        let _ = sw.run(&mut Steps(sh.clone()), &mut NoTracking, false);
        w.join().unwrap();
    });
}

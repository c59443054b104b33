//! Model 2: the switch racing a jbd2 commit and a new handle. The updates
//! barrier must hold new handles off from before the flush until the flag
//! has flipped, while the commit it waits for needs the running handles
//! to drain.

#![cfg(loom)]

mod loom_support;

use ext4_engine::locking::switch::{NoTracking, Switch, SwitchBug};
use ext4_engine::sync::lock;
use loom_support::*;

const PREEMPTIONS: usize = 5;

/// A handle that must see one journaling mode from start to stop.
fn handle(sh: &Shared) {
    sh.fs.updates.start_handle().unwrap();
    let before = lock(&sh.state).journal_data;
    let after = lock(&sh.state).journal_data;
    assert_eq!(before, after, "the journaling mode changed under a running handle");
    sh.fs.updates.stop_handle();
}

#[test]
fn the_switch_races_a_commit_and_a_new_handle() {
    explore("2 (chattr -j vs commit vs new handle)", Some(PREEMPTIONS), || {
        let sh = Shared::with_commit_thread(true);
        let h = { let sh = sh.clone(); loom::thread::spawn(move || handle(&sh)) };
        let c = { let sh = sh.clone(); loom::thread::spawn(move || commit_thread(&sh, 1)) };
        let sw = Switch { inode: &sh.inode, fs: &sh.fs, ino: 12, bug: SwitchBug::None };
        sw.run(&mut Steps(sh.clone()), &mut NoTracking, false).unwrap();
        h.join().unwrap();
        c.join().unwrap();
        sh.assert_idle();
        assert!(!lock(&sh.state).journal_data);
    });
}

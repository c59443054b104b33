//! Model 1: chattr -j racing a buffered writer and a write fault on the
//! same inode, and chattr +j racing a direct write. The switch is the
//! engine's own protocol (`locking::switch`), the locks its own.

#![cfg(loom)]

mod loom_support;

use ext4_engine::locking::switch::{NoTracking, Switch, SwitchBug};
use loom_support::*;

const PREEMPTIONS: usize = 5;

fn switch_racing_writers(bug: SwitchBug) {
    let sh = Shared::new(true);
    let threads = [
        { let sh = sh.clone(); loom::thread::spawn(move || buffered_write(&sh)) },
        { let sh = sh.clone(); loom::thread::spawn(move || page_fault(&sh)) },
    ];
    let sw = Switch { inode: &sh.inode, fs: &sh.fs, ino: 12, bug };
    sw.run(&mut Steps(sh.clone()), &mut NoTracking, false).unwrap();
    for t in threads {
        t.join().unwrap();
    }
    sh.assert_idle();
    sh.assert_pages_match_mode();
}

fn switch_racing_direct_io(bug: SwitchBug) {
    let sh = Shared::new(false);
    let dio = { let sh = sh.clone(); loom::thread::spawn(move || direct_write(&sh)) };
    let sw = Switch { inode: &sh.inode, fs: &sh.fs, ino: 12, bug };
    sw.run(&mut Steps(sh.clone()), &mut NoTracking, true).unwrap();
    dio.join().unwrap();
    sh.assert_idle();
}

#[test]
fn clearing_the_flag_races_a_buffered_writer_and_a_page_fault() {
    explore("1 (chattr -j vs buffered write vs page fault)", Some(PREEMPTIONS), || {
        switch_racing_writers(SwitchBug::None);
    });
}

#[test]
fn setting_the_flag_waits_for_direct_io_in_flight() {
    explore("1b (chattr +j vs direct write)", None, || {
        switch_racing_direct_io(SwitchBug::None);
    });
}

#[test]
fn bug_twin_a_switch_without_inode_dio_wait_is_caught() {
    expect_caught("twin_no_inode_dio_wait", "direct I/O");
}

#[test]
#[ignore = "a bug twin: run, expecting failure, by bug_twin_a_switch_without_inode_dio_wait_is_caught"]
fn twin_no_inode_dio_wait() {
    loom::model(|| switch_racing_direct_io(SwitchBug::SkipDioWait));
}

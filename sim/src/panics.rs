//! Panics as failures: a panic inside a simulation step is caught and
//! reported like any other failure of that run (seed, op, message, a shrunk
//! trace), instead of killing the swarm it runs in.
//!
//! While a thread runs [`catching`], the panic hook records the message and
//! location for it instead of printing them: shrinking replays a panicking
//! trace hundreds of times, and each would print a backtrace banner.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

fn install_hook() {
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if CATCHING.with(Cell::get) {
                let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
                LAST.with(|last| *last.borrow_mut() = Some(format!("{}{at}", message(info.payload()))));
            } else {
                default(info);
            }
        }));
    });
}

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-text payload".to_string()
    }
}

/// Runs `f`; a panic in it comes back as its message and location.
pub fn catching<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    let outer = CATCHING.with(|c| c.replace(true));
    let out = panic::catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    out.map_err(|payload| LAST.with(|last| last.borrow_mut().take()).unwrap_or_else(|| message(payload.as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_place() {
        assert_eq!(catching(|| 7), Ok(7));
        let caught = catching(|| -> u32 { panic!("bitmap of group {} is short", 3) }).unwrap_err();
        assert!(caught.starts_with("bitmap of group 3 is short at ") && caught.contains("panics.rs"), "{caught}");
        let nested = catching(|| catching(|| panic!("inner")).unwrap_err());
        assert!(nested.unwrap().starts_with("inner"));
    }
}

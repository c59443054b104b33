//! Mount options ext4 accepts that this engine does not model yet. An
//! option accepted and then ignored would let a run claim to test what it
//! never exercised, so each is refused at mount with the reason, until the
//! part of the engine that gives it meaning exists.

use ext4_model::{AllocPolicy, MountConfig};

/// Why the engine refuses `config` although ext4 accepts it, if it does.
pub fn unmodelled_option(config: &MountConfig) -> Option<String> {
    let default = AllocPolicy::default();
    if config.alloc.stream_request_blocks != default.stream_request_blocks {
        return Some("mb_stream_req= is not modelled yet: the engine's allocator has no preallocation, so it would change nothing".into());
    }
    if config.alloc.group_prealloc_blocks != default.group_prealloc_blocks {
        return Some("mb_group_prealloc= is not modelled yet: the engine's allocator has no preallocation, so it would change nothing".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_that_would_change_nothing_are_refused_with_the_reason() {
        assert_eq!(unmodelled_option(&MountConfig::default()), None);
        // Folio orders are real since the page cache: the option passes.
        let mut c = MountConfig { max_folio_order: Some(2), ..MountConfig::default() };
        assert_eq!(unmodelled_option(&c), None);
        c.max_folio_order = None;
        c.alloc.stream_request_blocks = 32;
        assert!(unmodelled_option(&c).is_some_and(|why| why.contains("mb_stream_req")));
        c.alloc.stream_request_blocks = 16;
        c.alloc.group_prealloc_blocks = 1024;
        assert!(unmodelled_option(&c).is_some_and(|why| why.contains("mb_group_prealloc")));
        // Real knobs pass.
        let real = MountConfig { alloc: AllocPolicy { skip_block_uninit: true, orlov: false, ..AllocPolicy::default() }, ..MountConfig::default() };
        assert_eq!(unmodelled_option(&real), None);
    }

    #[test]
    fn mount_refuses_them_as_invalid_arguments() {
        let dev = crate::fixtures::fresh_mounted(64 << 20).unmount().unwrap();
        let config = MountConfig { alloc: AllocPolicy { group_prealloc_blocks: 1024, ..AllocPolicy::default() }, ..MountConfig::default() };
        match crate::fs::Ext4::mount(dev, &config) {
            Err(e @ crate::Error::InvalidArgument(_)) => assert!(e.to_string().contains("mb_group_prealloc"), "{e}"),
            Err(e) => panic!("refused for another reason: {e}"),
            Ok(_) => panic!("mounted with an option the engine does not model"),
        }
    }
}

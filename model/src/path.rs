//! Splitting an op's path into components, with Linux's limits.
//!
//! The test bed takes absolute paths only. Empty components ("//") collapse as
//! in Linux; "." and ".." are kept for the resolver, since ".." must follow the
//! real parent, not the text.

use crate::op::{NAME_MAX, PATH_MAX};
use crate::Errno;

/// A checked path: its components and whether it ended in '/'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPath<'a> {
    pub components: Vec<&'a str>,
    pub trailing_slash: bool,
}

/// What the last component of a path is, as namei's `last_type` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Last<'a> {
    Normal(&'a str),
    Dot,
    DotDot,
    /// The path is "/" itself.
    Root,
}

impl<'a> SplitPath<'a> {
    pub fn parse(path: &'a str) -> Result<SplitPath<'a>, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if path.contains('\0') || !path.starts_with('/') {
            return Err(Errno::EINVAL);
        }
        // Over-long names are refused when looked up (ext4_lookup), in walk
        // order: see [`check_name`].
        // Sized up front: growing the vector was a measurable share of every op.
        let mut components = Vec::with_capacity(path.bytes().filter(|&b| b == b'/').count());
        components.extend(path.split('/').filter(|c| !c.is_empty()));
        let trailing_slash = path.len() > 1 && path.ends_with('/');
        Ok(SplitPath { components, trailing_slash })
    }

    /// The components leading to the last one, and the last one.
    pub fn split_last(&self) -> (&[&'a str], Last<'a>) {
        match self.components.split_last() {
            None => (&[], Last::Root),
            Some((last, parent)) => {
                let last = match *last {
                    "." => Last::Dot,
                    ".." => Last::DotDot,
                    name => Last::Normal(name),
                };
                (parent, last)
            }
        }
    }
}

/// ext4_lookup's refusal of a name longer than EXT4_NAME_LEN, at the moment
/// the name is looked up (so an earlier missing directory wins with ENOENT).
pub fn check_name(name: &str) -> Result<(), Errno> {
    if name.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(())
    }
}

/// A symlink body ending in a slash makes the name it ends a path with
/// demand a directory, as a trailing slash in the path itself does.
pub fn target_demands_dir(target: &str) -> bool {
    target.ends_with('/')
}

/// Splits a symlink target (relative or absolute) into components, lazily:
/// the resolver pushes them straight onto its stack, last first.
pub fn target_components(target: &str) -> (bool, impl DoubleEndedIterator<Item = &str>) {
    (target.starts_with('/'), target.split('/').filter(|c| !c.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_shapes() {
        assert_eq!(SplitPath::parse(""), Err(Errno::ENOENT));
        assert_eq!(SplitPath::parse("a/b"), Err(Errno::EINVAL));
        assert_eq!(SplitPath::parse("/a\0b"), Err(Errno::EINVAL));
        let long = format!("/{}", "x".repeat(256));
        assert!(SplitPath::parse(&long).is_ok(), "names are checked at lookup");
        assert_eq!(check_name(&"x".repeat(256)), Err(Errno::ENAMETOOLONG));
        let ok = format!("/{}", "x".repeat(255));
        assert!(SplitPath::parse(&ok).is_ok());
        let deep = "/a".repeat(2048);
        assert_eq!(SplitPath::parse(&deep), Err(Errno::ENAMETOOLONG));
        let p = SplitPath::parse("//a///b/").unwrap();
        assert_eq!(p.components, vec!["a", "b"]);
        assert!(p.trailing_slash);
        assert_eq!(p.split_last().1, Last::Normal("b"));
        assert_eq!(SplitPath::parse("/").unwrap().split_last().1, Last::Root);
        assert_eq!(SplitPath::parse("/a/..").unwrap().split_last().1, Last::DotDot);
        assert!(!SplitPath::parse("/").unwrap().trailing_slash);
    }
}

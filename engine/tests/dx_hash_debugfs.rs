//! The engine's directory hashes agree with e2fsprogs': `debugfs dx_hash`
//! over seeded names (letters, digits, "." and "_" (a leading "-" would be
//! an option to debugfs) and bytes above 0x7f, one to 100 bytes, so
//! several half-MD4 and TEA chunks), random seeds and the all-zero seed
//! (MD4's initial words), in all six hash versions.

mod common;

use common::*;
use ext4_engine::dir::hash::{name_hash, DxHash};

const CASES: usize = 1200;

fn uuid_text(seed: &[u8; 16]) -> String {
    let h: Vec<String> = seed.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", h[0..4].concat(), h[4..6].concat(), h[6..8].concat(), h[8..10].concat(), h[10..16].concat())
}

#[test]
fn name_hashes_match_debugfs_in_every_version() {
    let Some(debugfs) = tool("debugfs") else { return };
    let dir = Scratch::new("dx-hash");
    let mut r = Rng(0xd1a5_4a54);
    let alphabet: Vec<u8> = (b'a'..=b'z').chain(b'A'..=b'Z').chain(b'0'..=b'9').chain([b'.', b'_']).chain(0x80..=0xff).collect();
    let mut cases = Vec::new();
    let mut script = Vec::new();
    for i in 0..CASES {
        let len = 1 + r.below(100) as usize;
        let name: Vec<u8> = (0..len).map(|_| alphabet[r.below(alphabet.len() as u64) as usize]).collect();
        let mut seed = [0u8; 16];
        if i % 5 != 0 {
            seed.iter_mut().for_each(|b| *b = r.below(256) as u8);
        }
        let version = (i % 6) as u8;
        script.extend_from_slice(format!("dx_hash -h {version} -s {} ", uuid_text(&seed)).as_bytes());
        script.extend_from_slice(&name);
        script.push(b'\n');
        cases.push((name, seed, version));
    }
    let cmds = dir.path("cmds");
    std::fs::write(&cmds, &script).unwrap();
    let out = run(&debugfs, &["-f", cmds.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<(u32, u32)> = text
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.rsplit_once(" is 0x")?;
            let (major, rest) = rest.split_once(" (minor 0x")?;
            Some((u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(rest.trim_end_matches(')'), 16).ok()?))
        })
        .collect();
    assert_eq!(answers.len(), CASES, "debugfs answered {} of {CASES}:\n{}", answers.len(), combined(&out));
    for ((name, seed, version), (major, minor)) in cases.iter().zip(answers) {
        let how = DxHash::from_version(*version).unwrap();
        let got = name_hash(how, name, seed);
        assert_eq!((got.major, got.minor), (major, minor), "{how:?} of {name:?} with seed {}", uuid_text(seed));
    }
}

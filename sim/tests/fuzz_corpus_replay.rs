//! Replays every fuzz corpus file through the same body the fuzzer runs.

use std::path::Path;

#[test]
fn model_ops_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/model_ops");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        ext4_sim::fuzz_body::model_ops(&data);
        n += 1;
    }
    assert!(n >= 8, "corpus has {n} files");
}

#[test]
fn lockstep_ops_corpus_replays() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/lockstep_ops");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.unwrap().path();
        ext4_sim::fuzz_body::lockstep_ops(&std::fs::read(&path).unwrap());
        n += 1;
    }
    assert!(n >= 8, "corpus has {n} files");
}

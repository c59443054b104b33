#!/bin/bash -eu
# Builds every cargo-fuzz target for ClusterFuzzLite / OSS-Fuzz (their
# environment sets the sanitizer flags; debug assertions stay on, as in
# `cargo fuzz run`) and ships each with its committed seed corpus and its
# regressions, so a fleet starts where the repository's own corpus is.
cd "$SRC/ext4sim/fuzz"
# No comparison tracing, as fuzz/run builds: 1.5 to 2.5 times the inputs a
# second and more coverage per minute here (docs/fuzzing.md).
cargo fuzz build -O --debug-assertions --no-trace-compares
out_dir=target/x86_64-unknown-linux-gnu/release
for target in $(cargo fuzz list); do
    cp "$out_dir/$target" "$OUT/"
    seeds=$(mktemp -d)
    for dir in "corpus/$target" "regressions/$target"; do
        if [ -d "$dir" ]; then find "$dir" -type f ! -name '.*' -exec cp {} "$seeds/" \; ; fi
    done
    if [ -n "$(ls -A "$seeds")" ]; then (cd "$seeds" && zip -q "$OUT/${target}_seed_corpus.zip" ./*); fi
    rm -rf "$seeds"
    if [ -f "dict/$target.dict" ]; then cp "dict/$target.dict" "$OUT/$target.dict"; fi
    # The target's own settings (fuzz/options/TARGET.options) after the fleet's.
    printf '[libfuzzer]\nrss_limit_mb = 2560\ntimeout = 30\n' > "$OUT/$target.options"
    if [ -f "options/$target.options" ]; then
        sed -n '/^\[libfuzzer\]/,/^\[/{/^[a-z_]* *=/p}' "options/$target.options" >> "$OUT/$target.options"
    fi
done

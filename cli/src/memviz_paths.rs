//! Source paths as a `dipu memviz` page shows them: relative to the
//! repository or the package they belong to, so that a page (and a picture
//! of it) names no directory of the machine that built or ran the program.

use std::path::Path;

/// The workspace this `dipu` was built from: the parent of the cli crate.
fn workspace() -> &'static Path {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent().unwrap_or(cli)
}

/// `path` without the build machine's directories:
///
/// - a file of the workspace this `dipu` was built from, relative to it
///   (`allocator/src/replay.rs`);
/// - a crate from Cargo's registry, from the crate's folder
///   (`backtrace-0.3.74/src/lib.rs`, not `~/.cargo/registry/src/<index>/...`);
/// - a git dependency, from its checkout's folder
///   (`loom-5a1e0a3c/0b1d2e3/src/lib.rs`, not `~/.cargo/git/checkouts/...`);
/// - Rust's standard library, from `library/` (`/rustc/<hash>/` or a
///   rustup toolchain's `lib/rustlib/src/rust/`).
///
/// Any other path (a Python file, a C library) is returned unchanged.
pub(crate) fn short_path(path: &str) -> &str {
    shorten(path, workspace())
}

fn shorten<'a>(path: &'a str, workspace: &Path) -> &'a str {
    if let Some(rest) = Path::new(path)
        .strip_prefix(workspace)
        .ok()
        .and_then(Path::to_str)
        .filter(|rest| !rest.is_empty())
    {
        return rest;
    }
    // (marker, components after it that belong to the machine)
    const PREFIXES: [(&str, usize); 4] = [
        ("/registry/src/", 1),
        ("/git/checkouts/", 0),
        ("/lib/rustlib/src/rust/", 0),
        ("/rustc/", 1),
    ];
    for (marker, skip) in PREFIXES {
        let Some(at) = path.find(marker) else {
            continue;
        };
        if marker == "/rustc/" && at != 0 {
            continue;
        }
        let mut rest = &path[at + marker.len()..];
        for _ in 0..skip {
            match rest.split_once('/') {
                Some((_, after)) => rest = after,
                None => return path,
            }
        }
        if !rest.is_empty() {
            return rest;
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_files_are_relative_to_the_workspace() {
        let ws = Path::new("/work/wt-memviz");
        assert_eq!(
            shorten("/work/wt-memviz/allocator/src/replay.rs", ws),
            "allocator/src/replay.rs"
        );
        // A sibling directory that merely starts with the same name is not it.
        assert_eq!(
            shorten("/work/wt-memviz2/allocator/src/replay.rs", ws),
            "/work/wt-memviz2/allocator/src/replay.rs"
        );
        // This build's own workspace, as `short_path` uses it.
        let own = workspace().join("cli/src/memviz.rs");
        assert_eq!(short_path(own.to_str().unwrap()), "cli/src/memviz.rs");
    }

    #[test]
    fn dependencies_lose_cargo_home_and_the_index() {
        let ws = Path::new("/work/main");
        assert_eq!(
            shorten(
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/backtrace-0.3.74/src/lib.rs",
                ws
            ),
            "backtrace-0.3.74/src/lib.rs"
        );
        assert_eq!(
            shorten(
                "/opt/cargo/git/checkouts/loom-5a1e0a3c/0b1d2e3/src/rt/mod.rs",
                ws
            ),
            "loom-5a1e0a3c/0b1d2e3/src/rt/mod.rs"
        );
        assert_eq!(
            shorten(
                "/rustc/4eb161250e340c8f48f66e2b929ef4a5bed7c181/library/std/src/panicking.rs",
                ws
            ),
            "library/std/src/panicking.rs"
        );
        assert_eq!(
            shorten(
                "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/lib/rustlib/src/rust/library/core/src/ops/function.rs",
                ws
            ),
            "library/core/src/ops/function.rs"
        );
    }

    #[test]
    fn other_paths_are_unchanged() {
        let ws = Path::new("/work/main");
        for p in [
            "/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
            "train.py",
            "",
            "/work/main",
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f",
            "/srv/rustc/x.rs",
        ] {
            assert_eq!(shorten(p, ws), p);
        }
    }
}

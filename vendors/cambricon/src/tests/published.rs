//! The CNRT signatures against the text of the 161 CNRT prototypes that
//! PyPI's `bangc-mcp-server` 0.3.7 carries, extracted by
//! `scripts/cambricon-prototypes.sh` (CI runs both).

use std::collections::HashMap;
use std::path::Path;

use crate::cnrt::{self, Cnrt};
use dipu_vendorkit::bind::c_type;

/// Bound functions that return a string, not `cnrtRet_t`: not among the
/// package's prototypes (which are all `cnrtRet_t` functions).
const NOT_IN_THE_PACKAGE: [&str; 2] = ["cnrtGetErrorName", "cnrtGetErrorStr"];

/// `int *pCount` -> `int*`: the type without the parameter name or spaces.
fn arg_type(arg: &str) -> String {
    let arg = arg.trim();
    let name_at = arg
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    arg[..name_at].split_whitespace().collect::<String>()
}

#[test]
#[ignore = "needs scripts/cambricon-prototypes.sh (downloads bangc-mcp-server 0.3.7 from PyPI); CI runs it"]
fn cnrt_signatures_match_the_published_prototypes() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/bangc-mcp-server/cnrt-prototypes.txt");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run scripts/cambricon-prototypes.sh",
            file.display()
        )
    });
    let published: HashMap<String, Vec<String>> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cnrtRet_t ")?;
            let (name, args) = rest.split_once('(')?;
            let args = args.trim_end_matches(");");
            let args = if args.trim() == "void" {
                Vec::new()
            } else {
                args.split(',').map(arg_type).collect()
            };
            Some((name.to_owned(), args))
        })
        .collect();
    // 161 prototypes, 160 functions (cnrtMemcpy2D appears twice, spelled
    // two ways).
    assert_eq!(
        text.lines().count(),
        161,
        "the package's 161 CNRT prototypes"
    );
    assert_eq!(published.len(), 160);
    let names: HashMap<&str, &str> = cnrt::c_types().iter().map(|t| (t.rust, t.c)).collect();
    for sig in Cnrt::SIGNATURES {
        let Some(args) = published.get(sig.name) else {
            assert!(
                NOT_IN_THE_PACKAGE.contains(&sig.name),
                "{} is not among the published prototypes",
                sig.name
            );
            continue;
        };
        assert_eq!(sig.ret, "cnrtRet_t", "{}", sig.name);
        let ours: Vec<String> = sig
            .args
            .iter()
            .map(|(_, ty)| c_type(ty, &names).split_whitespace().collect())
            .collect();
        assert_eq!(
            &ours, args,
            "{}: ours, then the published prototype",
            sig.name
        );
    }
}

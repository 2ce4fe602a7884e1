//! Makes the `dipu` executable export DIOPI's runtime functions (diopirt)
//! and `dipu_launch_host_func_raw`, so that a kernel library opened by
//! `dipu diopi-test` resolves its references against the executable:
//! `-rdynamic` exports the executable's symbols, and `-u <name>` for each
//! function keeps the definition linked even though the executable itself
//! may call none of them. The names come from include/diopi/diopirt.h, so
//! a function added there is exported here too.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os != "linux" {
        return;
    }
    let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/diopi/diopirt.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let text = std::fs::read_to_string(&header).expect("include/diopi/diopirt.h");
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("DIOPI_RT_API"))
        .filter_map(|l| {
            let open = l.find('(')?;
            let start = l[..open].rfind([' ', '*'])? + 1;
            Some(l[start..open].to_owned())
        })
        .collect();
    assert!(
        names.len() >= 27,
        "only {} diopirt functions found in {}",
        names.len(),
        header.display()
    );
    names.push("dipu_launch_host_func_raw".to_owned());
    println!("cargo:rustc-link-arg-bin=dipu=-rdynamic");
    for name in names {
        println!("cargo:rustc-link-arg-bin=dipu=-Wl,-u,{name}");
    }
}

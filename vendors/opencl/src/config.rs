//! The vendor's environment variables.

use dipu_deviceapi::{Error, ErrorKind, Result};
use dipu_vendorkit::size::{parse_size, ACCEPTED};

/// Environment variable: which platform to use (a case-insensitive part of
/// its name); default: the first platform with a usable device.
pub const ENV_PLATFORM: &str = "DIPU_OPENCL_PLATFORM";
/// Environment variable: each device's memory budget in bytes (`8G`);
/// default: the device's global memory.
pub const ENV_MEMORY: &str = "DIPU_OPENCL_MEMORY";
/// Environment variable: which shared virtual memory device memory comes
/// from: `auto` (default), `fine` or `coarse`.
pub const ENV_SVM: &str = "DIPU_OPENCL_SVM";

/// Which kind of shared virtual memory (SVM) buffers device memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Svm {
    /// Fine-grained where every device has it, else coarse-grained.
    #[default]
    Auto,
    /// Fine-grained: no usable device without it.
    Fine,
    /// Coarse-grained even where fine-grained buffers exist: device memory
    /// is then not host-accessible, as on a discrete GPU.
    Coarse,
}

/// The vendor's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// A part of the platform's name to choose it by (`None`: the first
    /// platform with a usable device).
    pub platform: Option<String>,
    /// Each device's memory budget, below the device's global memory
    /// (`None`: all of it).
    pub memory: Option<u64>,
    /// Which SVM buffers device memory is.
    pub svm: Svm,
}

impl Config {
    /// The settings of `DIPU_OPENCL_PLATFORM`, `DIPU_OPENCL_MEMORY` and
    /// `DIPU_OPENCL_SVM`; a bad value is `InvalidConfig` naming the variable.
    pub fn from_env() -> Result<Config> {
        Self::from_values(|name| std::env::var(name).ok())
    }

    /// The settings from `get` (a variable's value, or `None` when unset).
    pub fn from_values(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let bad = |name: &str, value: &str, why: String| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("{name}={value:?} is not valid: {why}"),
            )
        };
        let platform = get(ENV_PLATFORM)
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty());
        let memory = match get(ENV_MEMORY) {
            None => None,
            Some(text) => match parse_size(&text) {
                Ok(0) => return Err(bad(ENV_MEMORY, &text, "the budget must be positive".into())),
                Ok(bytes) => Some(bytes),
                Err(why) => {
                    return Err(bad(
                        ENV_MEMORY,
                        &text,
                        format!("{why}; expected {ACCEPTED}"),
                    ))
                }
            },
        };
        let svm = match get(ENV_SVM)
            .map(|s| s.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("" | "auto") => Svm::Auto,
            Some("fine") => Svm::Fine,
            Some("coarse") => Svm::Coarse,
            Some(other) => {
                return Err(bad(ENV_SVM, other, "expected auto, fine or coarse".into()));
            }
        };
        Ok(Config {
            platform,
            memory,
            svm,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Config> {
        Config::from_values(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse(&[]).unwrap(), Config::default());
        let c = parse(&[
            (ENV_PLATFORM, " portable "),
            (ENV_MEMORY, "512M"),
            (ENV_SVM, "Coarse"),
        ])
        .unwrap();
        assert_eq!(c.platform.as_deref(), Some("portable"));
        assert_eq!(c.memory, Some(512 << 20));
        assert_eq!(c.svm, Svm::Coarse);
        assert_eq!(parse(&[(ENV_SVM, "fine")]).unwrap().svm, Svm::Fine);
        assert_eq!(parse(&[(ENV_PLATFORM, "  ")]).unwrap().platform, None);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, value, why) in [
            (ENV_MEMORY, "0", "must be positive"),
            (ENV_MEMORY, "G", "does not start"),
            (ENV_MEMORY, "8GB", "not a known unit"),
            (ENV_SVM, "both", "expected auto, fine or coarse"),
        ] {
            let e = parse(&[(var, value)]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(
                e.message().contains(var) && e.message().contains(why),
                "{e}"
            );
        }
    }
}

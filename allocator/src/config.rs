//! Allocator options: the algorithm (`DIPU_DEVICE_MEMCACHING_ALGORITHM`)
//! and `DIPU_ALLOC_CONF` (PyTorch's `key:value,key:value` form; DIPU's
//! `DIPU_TORCH_ALLOCATOR_CONF` is accepted as an alias).

use std::fmt;
use std::str::FromStr;

use dipu_deviceapi::{Error, ErrorKind, Result};

/// Environment variable choosing the device allocator algorithm.
pub const ENV_ALGORITHM: &str = "DIPU_DEVICE_MEMCACHING_ALGORITHM";
/// Environment variable with the allocator options.
pub const ENV_CONF: &str = "DIPU_ALLOC_CONF";
/// DIPU's name for [`ENV_CONF`], accepted when that is unset.
pub const ENV_CONF_ALIAS: &str = "DIPU_TORCH_ALLOCATOR_CONF";

/// A device allocator algorithm, by DIPU's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// PyTorch's caching policy.
    Torch,
    /// Best fit with splitting and merging over binned free lists.
    BestFit,
    /// Size bins without splitting.
    BinSize,
    /// No caching: every call goes to the vendor.
    Raw,
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Torch,
        Algorithm::BestFit,
        Algorithm::BinSize,
        Algorithm::Raw,
    ];

    /// The default algorithm (see docs/allocator.md for the measurements).
    pub const DEFAULT: Algorithm = Algorithm::BestFit;

    /// DIPU's name: `TORCH`, `BF`, `BS` or `RAW`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Torch => "TORCH",
            Algorithm::BestFit => "BF",
            Algorithm::BinSize => "BS",
            Algorithm::Raw => "RAW",
        }
    }

    /// The algorithm named by `DIPU_DEVICE_MEMCACHING_ALGORITHM`, or the default.
    pub fn from_env() -> Result<Algorithm> {
        match std::env::var(ENV_ALGORITHM) {
            Ok(v) if !v.trim().is_empty() => v.parse().map_err(|e: Error| e.context(ENV_ALGORITHM)),
            _ => Ok(Algorithm::DEFAULT),
        }
    }
}

impl FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Algorithm> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("unknown allocator algorithm {s:?}: use TORCH, BF, BS or RAW"),
                )
            })
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The options of `DIPU_ALLOC_CONF`.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// Grow segments by mapping chunks (needs the vendor's virtual-memory capability).
    pub expandable_segments: bool,
    /// Blocks at least this large are never split (`None`: no limit).
    pub max_split_size: Option<usize>,
    /// Free cached blocks (oldest first) once reserved memory passes this
    /// fraction of the allowed memory (`None`: off).
    pub garbage_collection_threshold: Option<f64>,
    /// Round requests up to one of this many steps between powers of two;
    /// per size class: `(upper bound of the class in bytes, divisions)`,
    /// the last class with bound `usize::MAX`. Empty: off.
    pub roundup_power2_divisions: Vec<(usize, usize)>,
    /// The fraction of the device's memory this process may reserve.
    pub per_process_memory_fraction: f64,
    /// Whether `BF` and `BS` keep per-thread caches in front of the device
    /// lock (faster repeats; every other call does a little more work).
    pub thread_caches: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            expandable_segments: false,
            max_split_size: None,
            garbage_collection_threshold: None,
            roundup_power2_divisions: Vec::new(),
            per_process_memory_fraction: 1.0,
            thread_caches: true,
        }
    }
}

const MIB: usize = 1 << 20;

impl AllocatorConfig {
    /// The options from `DIPU_ALLOC_CONF` (or `DIPU_TORCH_ALLOCATOR_CONF`).
    pub fn from_env() -> Result<AllocatorConfig> {
        for name in [ENV_CONF, ENV_CONF_ALIAS] {
            if let Ok(value) = std::env::var(name) {
                return AllocatorConfig::parse(&value).map_err(|e| e.context(name));
            }
        }
        Ok(AllocatorConfig::default())
    }

    /// Parses `key:value,key:value`. Unknown keys and bad values are errors
    /// that name the key.
    pub fn parse(text: &str) -> Result<AllocatorConfig> {
        let mut config = AllocatorConfig::default();
        for item in split_top_level(text) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| bad("", item, "expected `key:value`"))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "expandable_segments" => config.expandable_segments = parse_bool(key, value)?,
                "thread_caches" => config.thread_caches = parse_bool(key, value)?,
                "max_split_size_mb" => {
                    let mb: usize = value.parse().map_err(|_| bad(key, value, "use a whole number of MiB"))?;
                    if mb == 0 || mb.checked_mul(MIB).is_none() {
                        return Err(bad(key, value, "use a whole number of MiB above 0"));
                    }
                    config.max_split_size = Some(mb * MIB);
                }
                "garbage_collection_threshold" => {
                    let t: f64 = value.parse().map_err(|_| bad(key, value, "use a number between 0 and 1"))?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(bad(key, value, "use a number strictly between 0 and 1"));
                    }
                    config.garbage_collection_threshold = Some(t);
                }
                "roundup_power2_divisions" => config.roundup_power2_divisions = parse_divisions(key, value)?,
                "per_process_memory_fraction" => {
                    let f: f64 = value.parse().map_err(|_| bad(key, value, "use a number in (0, 1]"))?;
                    if !(f > 0.0 && f <= 1.0) {
                        return Err(bad(key, value, "use a number in (0, 1]"));
                    }
                    config.per_process_memory_fraction = f;
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidConfig,
                        format!(
                            "unknown option `{key}`: the options are expandable_segments, max_split_size_mb, \
                             garbage_collection_threshold, roundup_power2_divisions, per_process_memory_fraction, \
                             thread_caches"
                        ),
                    ))
                }
            }
        }
        Ok(config)
    }

    /// `size` rounded up by `roundup_power2_divisions` (unchanged when off).
    pub fn round_power2_divisions(&self, size: usize) -> usize {
        let Some(&(_, divisions)) = self
            .roundup_power2_divisions
            .iter()
            .find(|(bound, _)| size <= *bound)
        else {
            return size;
        };
        if divisions <= 1 || size <= 512 {
            return size;
        }
        let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
        if floor == size {
            return size;
        }
        let step = (floor / divisions).max(1);
        size.div_ceil(step) * step
    }
}

fn bad(key: &str, value: &str, hint: &str) -> Error {
    Error::new(
        ErrorKind::InvalidConfig,
        format!("bad value {value:?} for `{key}`: {hint}"),
    )
}

/// Splits on commas outside `[...]`.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// `8` (every size) or `[256:1,512:2,>:8]` (per size class in MiB, `>` for the rest).
fn parse_divisions(key: &str, value: &str) -> Result<Vec<(usize, usize)>> {
    let number = |v: &str| -> Result<usize> {
        let n: usize = v
            .trim()
            .parse()
            .map_err(|_| bad(key, value, "divisions are powers of two"))?;
        if n == 0 || !n.is_power_of_two() {
            return Err(bad(key, value, "divisions are powers of two"));
        }
        Ok(n)
    };
    let Some(list) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        return Ok(vec![(usize::MAX, number(value)?)]);
    };
    let mut classes = Vec::new();
    for entry in list.split(',') {
        let (size, divs) = entry
            .split_once(':')
            .ok_or_else(|| bad(key, value, "entries are `MiB:divisions` or `>:divisions`"))?;
        let bound = match size.trim() {
            ">" => usize::MAX,
            mb => mb
                .parse::<usize>()
                .ok()
                .and_then(|m| m.checked_mul(MIB))
                .ok_or_else(|| bad(key, value, "size classes are whole MiB or `>`"))?,
        };
        classes.push((bound, number(divs)?));
    }
    classes.sort_by_key(|c| c.0);
    Ok(classes)
}

/// `True` or `False` (PyTorch's spelling; lower case and 1/0 accepted).
fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value {
        "True" | "true" | "1" => Ok(true),
        "False" | "false" | "0" => Ok(false),
        _ => Err(bad(key, value, "use True or False")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_option() {
        let c = AllocatorConfig::parse(
            "expandable_segments:True, max_split_size_mb:64,garbage_collection_threshold:0.8,\
             roundup_power2_divisions:[256:1,512:2,>:8],per_process_memory_fraction:0.5,\
             thread_caches:False",
        )
        .unwrap();
        assert!(c.expandable_segments);
        assert!(!c.thread_caches);
        assert!(AllocatorConfig::default().thread_caches);
        assert_eq!(c.max_split_size, Some(64 << 20));
        assert_eq!(c.garbage_collection_threshold, Some(0.8));
        assert_eq!(
            c.roundup_power2_divisions,
            vec![(256 << 20, 1), (512 << 20, 2), (usize::MAX, 8)]
        );
        assert_eq!(c.per_process_memory_fraction, 0.5);
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("max_split_size_mb:abc", "max_split_size_mb"),
            ("expandable_segments:yes", "expandable_segments"),
            ("thread_caches:maybe", "thread_caches"),
            (
                "garbage_collection_threshold:1.5",
                "garbage_collection_threshold",
            ),
            (
                "per_process_memory_fraction:0",
                "per_process_memory_fraction",
            ),
            ("roundup_power2_divisions:3", "roundup_power2_divisions"),
            ("roundup_power2_divisions:[x:2]", "roundup_power2_divisions"),
            ("colour:blue", "colour"),
        ] {
            let e = AllocatorConfig::parse(text).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.message().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn power2_divisions_round_like_pytorch() {
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.round_power2_divisions(1 << 20), 1 << 20);
        assert_eq!(
            c.round_power2_divisions((1 << 20) + 1),
            (1 << 20) + (1 << 18)
        );
        assert_eq!(c.round_power2_divisions(1300 << 10), 1536 << 10);
        assert_eq!(
            AllocatorConfig::default().round_power2_divisions(12345),
            12345
        );
    }

    #[test]
    fn algorithms_parse_by_dipu_name() {
        assert_eq!("bf".parse::<Algorithm>().unwrap(), Algorithm::BestFit);
        assert_eq!("TORCH".parse::<Algorithm>().unwrap(), Algorithm::Torch);
        assert!("XYZ"
            .parse::<Algorithm>()
            .unwrap_err()
            .message()
            .contains("TORCH, BF, BS or RAW"));
    }
}

//! Unit tests. `fake_symbols` loads the fakes (dev-dependencies). The header test needs the CANN headers that
//! `scripts/cann-headers.sh` downloads, and fails (never skips) without them.

mod fake_symbols;
mod headers;

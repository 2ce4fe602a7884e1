//! Unit tests. `fake_symbols` loads the fakes (dev-dependencies); `fake_types`
//! checks the fake's prototypes against the bindings and the headers. The header test needs the CANN headers that
//! `scripts/cann-headers.sh` downloads, and fails (never skips) without them.

mod fake_symbols;
mod fake_types;
mod headers;

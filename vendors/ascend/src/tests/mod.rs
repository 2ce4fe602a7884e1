//! Unit tests. The header test needs the CANN headers that
//! `scripts/cann-headers.sh` downloads, and fails (never skips) without them.

mod headers;

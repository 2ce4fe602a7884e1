//! Unit tests: every constant, enum value and struct layout the bindings
//! rely on, pinned with the published version it was taken from, and the
//! translations of our types to CNRT's and CNCL's.

mod header;
mod pins;
mod published;

//! Unit tests: the bindings against the Khronos headers, and the vendor on
//! PoCL.

mod headers;
mod pocl;

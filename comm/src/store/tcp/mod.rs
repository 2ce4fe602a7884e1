//! The TCP store: a client and a server wire-compatible with
//! torch.distributed's `TCPStore` (see the protocol notes in
//! [`crate::store`]).

mod client;
mod conn;
mod env;
mod frame;
mod outbox;
mod reactor;
mod request;
mod server;
mod session;
mod state;
mod wire;

pub use client::TcpStore;
pub use env::EnvRendezvous;
pub use server::TcpStoreServer;
pub use wire::TORCH_VALIDATION_MAGIC;

//! torchrun-style rendezvous from the environment (torch's `env://`).

use std::time::Duration;

use dipu_deviceapi::{Error, ErrorKind, Result};

use super::client::TcpStore;

/// The rendezvous torchrun (or a launcher like it) describes in the
/// environment: `MASTER_ADDR`, `MASTER_PORT`, `RANK` and `WORLD_SIZE`, and
/// `TORCHELASTIC_USE_AGENT_STORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvRendezvous {
    /// `MASTER_ADDR`: the host of the store's server.
    pub master_addr: String,
    /// `MASTER_PORT`: its port.
    pub master_port: u16,
    /// `RANK`: this process's rank, `0..world_size`.
    pub rank: usize,
    /// `WORLD_SIZE`: how many ranks.
    pub world_size: usize,
    /// `TORCHELASTIC_USE_AGENT_STORE=True`: torchrun's agent already serves
    /// the store at `MASTER_ADDR:MASTER_PORT`, so no rank starts one.
    pub agent_store: bool,
}

impl EnvRendezvous {
    /// Reads the process's environment.
    pub fn from_env() -> Result<Self> {
        EnvRendezvous::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup` (a variable's value, or `None`
    /// when it is not set).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &str| -> Result<String> {
            match lookup(name) {
                Some(v) if !v.is_empty() => Ok(v),
                _ => Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!("env:// rendezvous: the environment variable {name} is not set (torchrun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE)"),
                )),
            }
        };
        let number = |name: &str| -> Result<u64> {
            let v = var(name)?;
            v.trim().parse().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("env:// rendezvous: {name}={v:?} is not a non-negative integer"),
                )
            })
        };
        let master_port = number("MASTER_PORT")?;
        let master_port = u16::try_from(master_port).map_err(|_| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!("env:// rendezvous: MASTER_PORT={master_port} is not a port (0 to 65535)"),
            )
        })?;
        let rank = number("RANK")? as usize;
        let world_size = number("WORLD_SIZE")? as usize;
        if rank >= world_size {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("env:// rendezvous: RANK={rank} is not below WORLD_SIZE={world_size}"),
            ));
        }
        Ok(EnvRendezvous {
            master_addr: var("MASTER_ADDR")?,
            master_port,
            rank,
            world_size,
            agent_store: lookup("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True"),
        })
    }

    /// Whether this rank hosts the store's server: rank 0, unless torchrun's
    /// agent hosts it.
    pub fn is_master(&self) -> bool {
        self.rank == 0 && !self.agent_store
    }

    /// This rank's store: rank 0 starts the server (as torch's
    /// `init_process_group("env://")` does), every rank connects, and each
    /// waits up to `timeout` for the others to join.
    pub fn store(&self, timeout: Duration) -> Result<TcpStore> {
        TcpStore::new(
            &self.master_addr,
            self.master_port,
            Some(self.world_size),
            self.is_master(),
            timeout,
            true,
        )
    }
}

impl TcpStore {
    /// Joins the torchrun-style rendezvous described by the environment
    /// ([`EnvRendezvous`]) with the default timeout.
    pub fn from_env() -> Result<Self> {
        EnvRendezvous::from_env()?.store(super::super::DEFAULT_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<EnvRendezvous> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        EnvRendezvous::from_lookup(|name| map.get(name).cloned())
    }

    const FULL: [(&str, &str); 4] = [
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
        ("RANK", "0"),
        ("WORLD_SIZE", "4"),
    ];

    #[test]
    fn torchrun_variables_are_read() {
        let r = parse(&FULL).unwrap();
        assert_eq!(r.master_addr, "node0");
        assert_eq!((r.master_port, r.rank, r.world_size), (29500, 0, 4));
        assert!(r.is_master());
        let mut agent = FULL.to_vec();
        agent.push(("TORCHELASTIC_USE_AGENT_STORE", "True"));
        assert!(!parse(&agent).unwrap().is_master());
    }

    #[test]
    fn missing_or_bad_variables_are_named() {
        for (drop, name) in [
            (0, "MASTER_ADDR"),
            (1, "MASTER_PORT"),
            (2, "RANK"),
            (3, "WORLD_SIZE"),
        ] {
            let mut vars = FULL.to_vec();
            vars.remove(drop);
            let e = parse(&vars).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.message().contains(name), "{e}");
        }
        let mut vars = FULL.to_vec();
        vars[1] = ("MASTER_PORT", "70000");
        assert!(parse(&vars).unwrap_err().message().contains("70000"));
        vars[1] = ("MASTER_PORT", "x");
        assert!(parse(&vars).unwrap_err().message().contains("\"x\""));
        let mut vars = FULL.to_vec();
        vars[2] = ("RANK", "4");
        assert!(parse(&vars).unwrap_err().message().contains("RANK=4"));
    }
}

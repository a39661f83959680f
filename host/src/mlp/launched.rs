//! One process per GPU, started by a launcher: `torchrun --no-python`, or `srun`/`mpirun` with
//! the same variables set. This process's place in that world comes from the environment, and
//! NCCL's own bootstrap connects the ranks at the master's address: no rendezvous of ours.
use anyhow::{Result, anyhow, ensure};

/// The variables a launcher sets for each process, as `torchrun` names them.
const VARS: [&str; 5] = [
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
];

/// How long a rank waits for every other rank to join NCCL's bootstrap before it gives up, in
/// seconds, unless `HOST_BOOTSTRAP_TIMEOUT` says otherwise: a rank that failed before joining (no
/// GPU, bad input on one host) must not leave the others waiting for ever.
const BOOTSTRAP_TIMEOUT_S: u64 = 120;

/// This process's place in a world of processes a launcher started.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub rank: usize,
    pub world: usize,
    /// The GPU of this host the rank drives.
    pub local_rank: usize,
    /// `host:port` where rank 0 listens for NCCL's bootstrap: `NCCL_COMM_ID` where set, else
    /// `MASTER_ADDR` at the port after `MASTER_PORT`, on which the launcher's own store listens.
    pub root: String,
    /// Seconds to wait for every rank at the bootstrap.
    pub timeout_s: u64,
}

impl Launched {
    /// The world this process was started into, or `None` without `WORLD_SIZE`.
    pub fn from_env() -> Result<Option<Launched>> {
        Launched::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launched>> {
        if var("WORLD_SIZE").is_none() {
            return Ok(None);
        }
        let missing: Vec<&str> = VARS.iter().copied().filter(|k| var(k).is_none()).collect();
        ensure!(
            missing.is_empty(),
            "WORLD_SIZE is set but not {}: one process per GPU needs {} (as torchrun sets them)",
            missing.join(", "),
            VARS.join(", ")
        );
        let number = |k: &str| {
            let v = var(k).unwrap_or_default();
            v.parse::<usize>()
                .map_err(|_| anyhow!("{k}={v:?} is not a whole number"))
        };
        let (world, rank, local_rank) = (
            number("WORLD_SIZE")?,
            number("RANK")?,
            number("LOCAL_RANK")?,
        );
        ensure!(world > 0, "WORLD_SIZE must be at least 1");
        ensure!(rank < world, "RANK {rank} is not below WORLD_SIZE {world}");
        let root = match var("NCCL_COMM_ID") {
            Some(id) => id,
            None => {
                let port = number("MASTER_PORT")?;
                ensure!(
                    port < u16::MAX as usize,
                    "MASTER_PORT={port} leaves no port after it for NCCL's bootstrap; set NCCL_COMM_ID=host:port"
                );
                format!("{}:{}", var("MASTER_ADDR").unwrap_or_default(), port + 1)
            }
        };
        let timeout_s = match var("HOST_BOOTSTRAP_TIMEOUT") {
            Some(_) => number("HOST_BOOTSTRAP_TIMEOUT")? as u64,
            None => BOOTSTRAP_TIMEOUT_S,
        };
        Ok(Some(Launched {
            rank,
            world,
            local_rank,
            root,
            timeout_s,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launched(vars: &[(&str, &str)]) -> Result<Option<Launched>> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Launched::from_vars(|k| map.get(k).cloned())
    }

    const TORCHRUN: [(&str, &str); 5] = [
        ("WORLD_SIZE", "4"),
        ("RANK", "3"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node7"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn torchruns_variables_give_the_rank_and_the_port_after_the_masters() {
        assert_eq!(launched(&[]).unwrap(), None);
        let l = launched(&TORCHRUN).unwrap().unwrap();
        let expected = Launched {
            rank: 3,
            world: 4,
            local_rank: 1,
            root: "node7:29501".into(),
            timeout_s: BOOTSTRAP_TIMEOUT_S,
        };
        assert_eq!(l, expected);
        let mut own = TORCHRUN.to_vec();
        own.push(("NCCL_COMM_ID", "10.0.0.1:4000"));
        own.push(("HOST_BOOTSTRAP_TIMEOUT", "600"));
        let l = launched(&own).unwrap().unwrap();
        assert_eq!((l.root.as_str(), l.timeout_s), ("10.0.0.1:4000", 600));
    }

    #[test]
    fn an_incomplete_or_inconsistent_world_is_refused_with_the_reason() {
        let err = |vars: &[(&str, &str)]| launched(vars).unwrap_err().to_string();
        assert!(err(&TORCHRUN[..3]).contains("not MASTER_ADDR, MASTER_PORT"));
        let with = |k: &str, v: &'static str| {
            let mut vars = TORCHRUN.to_vec();
            vars.iter_mut().find(|(name, _)| *name == k).unwrap().1 = v;
            err(&vars)
        };
        assert!(with("RANK", "4").contains("RANK 4 is not below WORLD_SIZE 4"));
        assert!(with("LOCAL_RANK", "one").contains("LOCAL_RANK=\"one\" is not a whole number"));
        assert!(with("WORLD_SIZE", "0").contains("at least 1"));
        assert!(with("MASTER_PORT", "65535").contains("NCCL_COMM_ID"));
    }
}

//! The control connection's messages and their authentication.
//!
//! On connect each side first sends `nonce <64 hex>`: 32 random bytes of its own. Every later
//! line is `<HMAC-SHA256 in hex> <JSON envelope>`, the MAC taken under the job's secret over the
//! *receiver's* nonce, a newline and the JSON. So a line is good on one connection, in one
//! direction, once (the envelope's sequence numbers rise by one): a captured message cannot be
//! replayed, there or on another connection. The envelope names the job and the sender; a
//! receiver takes only its own job, and only the node that said hello on that connection.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::plan::RestartPolicy;

/// The longest line either side reads; a longer one ends the connection.
pub const MAX_LINE: usize = 64 * 1024;

/// Bytes of a nonce, and of the secret.
pub const RANDOM_BYTES: usize = 32;

/// A worker over several nodes, as the node holding one of its ranks describes it in its hello:
/// the coordinator learns the job's units from the nodes (they all plan the same layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnitInfo {
    /// `decode[0]`.
    pub worker: String,
    /// Its nodes; the first is its leader.
    pub nodes: Vec<String>,
    pub policy: RestartPolicy,
    /// Exit codes that count as success.
    pub success_codes: Vec<i32>,
    /// Restarts over the whole job.
    pub max_restarts: u32,
    pub backoff_initial_ms: u64,
    pub backoff_factor: f64,
    pub backoff_max_ms: u64,
    /// How long its rank may take to stop (its grace): the coordinator's bound on the `down`s.
    pub stop_ms: u64,
}

/// What travels. Nodes send `hello`, `heartbeat`, `down`, `ready`, `failing`, `finished`,
/// `asked`, `leaving`, `tier`, `registered`; the coordinator sends `heartbeat`, `stop`, `start`,
/// `give-up`, `node-failed`, `job-done`, `job-stop`, `may-stop`, `may-register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Body {
    /// A node's first message: the units it holds ranks of, and whether it runs what the job
    /// is for (a terminal process: the benchmark client), whose end ends the job; and how many
    /// of its Mooncake stores wait for the coordinator's word to register with the master
    /// (`may-register`).
    Hello {
        units: Vec<UnitInfo>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        terminal: bool,
        #[serde(default, skip_serializing_if = "is_zero")]
        stores: u32,
    },
    Heartbeat,
    /// A rank of `worker` is down on the sender's node, in the worker's `generation`. `code`
    /// and `exit` when it ended unasked (the failure the coordinator decides on).
    Down {
        worker: String,
        generation: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<String>,
        /// The rank's process on the sender's node (its log is `<node>.<process>.log`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        process: Option<String>,
    },
    /// The leader rank of `worker`, started again in `generation`, is ready (on the sender's node).
    Ready {
        worker: String,
        generation: u64,
    },
    /// The sender's node failed for good (a critical failure): every node drains.
    Failing {
        reason: String,
    },
    /// The sender stops in order (a signal, its workers done): its connection may close.
    Leaving,
    /// The sender was asked to stop (`signal`, e.g. `SIGTERM`); said before `leaving`. From the
    /// coordinator's node it stops the whole job (`job-stop`).
    Asked {
        signal: String,
    },
    /// The coordinator's node (`node`) was asked to stop (`signal`): stop as if asked too.
    JobStop {
        node: String,
        signal: String,
    },
    /// What the job is for ended on the sender's node (its terminal processes exited): `detail`
    /// says how. The sender keeps running until `job-done`: once every node that holds a
    /// terminal process has said so (and every node has said hello), the job is done.
    Finished {
        detail: String,
    },
    /// The job is done (`node`'s word completed it), to every node, the finished ones too:
    /// drain.
    JobDone {
        node: String,
        detail: String,
    },
    /// Stop your rank of `worker`; generation `generation` comes next.
    Stop {
        worker: String,
        generation: u64,
    },
    /// Every rank of `worker` is down: start yours, generation `generation`.
    Start {
        worker: String,
        generation: u64,
    },
    /// `worker` is given up: fail your rank.
    GiveUp {
        worker: String,
        reason: String,
    },
    /// `node` failed for good, or is gone: drain.
    NodeFailed {
        node: String,
        reason: String,
    },
    /// In the sender's teardown: the lowest teardown tier (`ProcessSpec::teardown_tier`) of a
    /// process still alive there; [`TIER_NONE`] once nothing is.
    Tier {
        pending: u8,
    },
    /// The job-wide teardown order: every node may stop its processes of tiers up to `tier`
    /// (every lower tier has stopped on every node); `waiting` names the nodes whose processes
    /// of `tier` still ran then, which hold the next tier back. Said once per tier: a node that
    /// finishes the tier changes no one's word.
    MayStop {
        tier: u8,
        waiting: Vec<String>,
    },
    /// The sender's stores that waited for `may-register` are registered with the master (the
    /// master lists each at its size), or will not be (one failed, the node stops): their
    /// places are free.
    Registered,
    /// The stores of the node told may register with the master now: `registering` stores of
    /// the job (these included) are registering, `waiting` more wait for a place.
    MayRegister {
        registering: u32,
        waiting: u32,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// [`Body::Tier`]'s `pending` once nothing is left on the node.
pub const TIER_NONE: u8 = u8::MAX;

/// What a node says in its hello.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hello {
    pub units: Vec<UnitInfo>,
    pub terminal: bool,
    /// Its stores that wait for `may-register`.
    pub stores: u32,
}

impl Hello {
    pub fn body(&self) -> Body {
        Body::Hello {
            units: self.units.clone(),
            terminal: self.terminal,
            stores: self.stores,
        }
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub job: String,
    pub from: String,
    pub seq: u64,
    pub body: Body,
}

/// Why a line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a control message ({0})")]
    Malformed(String),
    #[error("its MAC does not match: another secret, or an altered message")]
    BadMac,
    #[error("it is for job {0}")]
    OtherJob(String),
    #[error("sequence number {got} where {want} was due: a replay, or a lost message")]
    Sequence { got: u64, want: u64 },
    #[error("it claims to come from {got}, but {want} said hello on this connection")]
    Sender { got: String, want: String },
}

/// A fresh random nonce (or secret).
pub fn random() -> std::io::Result<[u8; RANDOM_BYTES]> {
    let mut b = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(b)
}

/// The first line of either side.
pub fn nonce_line(nonce: &[u8; RANDOM_BYTES]) -> String {
    format!("nonce {}\n", hex::encode(nonce))
}

/// The peer's nonce from its first line.
pub fn parse_nonce(line: &str) -> Result<[u8; RANDOM_BYTES], Refusal> {
    let hexed = line
        .trim_end()
        .strip_prefix("nonce ")
        .ok_or_else(|| Refusal::Malformed("no nonce first".into()))?;
    let mut b = [0u8; RANDOM_BYTES];
    hex::decode_to_slice(hexed, &mut b).map_err(|e| Refusal::Malformed(format!("nonce: {e}")))?;
    Ok(b)
}

fn mac(secret: &[u8], nonce: &[u8; RANDOM_BYTES], json: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(b"\n");
    m.update(json);
    m
}

/// Seals what one side sends on one connection.
pub struct Sealer {
    secret: Vec<u8>,
    peer_nonce: [u8; RANDOM_BYTES],
    job: String,
    from: String,
    seq: u64,
}

impl Sealer {
    pub fn new(secret: &[u8], peer_nonce: [u8; RANDOM_BYTES], job: &str, from: &str) -> Self {
        Sealer {
            secret: secret.to_vec(),
            peer_nonce,
            job: job.to_string(),
            from: from.to_string(),
            seq: 0,
        }
    }

    /// The line for `body`, newline included.
    pub fn seal(&mut self, body: Body) -> String {
        self.seq += 1;
        let env = Envelope {
            job: self.job.clone(),
            from: self.from.clone(),
            seq: self.seq,
            body,
        };
        let json = serde_json::to_string(&env).expect("an envelope always serializes");
        let tag = mac(&self.secret, &self.peer_nonce, json.as_bytes())
            .finalize()
            .into_bytes();
        format!("{} {json}\n", hex::encode(tag))
    }
}

/// Checks what one side receives on one connection.
pub struct Opener {
    secret: Vec<u8>,
    my_nonce: [u8; RANDOM_BYTES],
    job: String,
    seq: u64,
    peer: Option<String>,
}

impl Opener {
    pub fn new(secret: &[u8], my_nonce: [u8; RANDOM_BYTES], job: &str) -> Self {
        Opener {
            secret: secret.to_vec(),
            my_nonce,
            job: job.to_string(),
            seq: 0,
            peer: None,
        }
    }

    /// The sender, once its first good message came.
    pub fn peer(&self) -> Option<&str> {
        self.peer.as_deref()
    }

    /// The envelope of a good line; a refused line changes nothing.
    pub fn open(&mut self, line: &str) -> Result<Envelope, Refusal> {
        let line = line.trim_end_matches(['\n', '\r']);
        let (tag, json) = line
            .split_once(' ')
            .ok_or_else(|| Refusal::Malformed("no MAC".into()))?;
        let tag = hex::decode(tag).map_err(|_| Refusal::Malformed("the MAC is not hex".into()))?;
        mac(&self.secret, &self.my_nonce, json.as_bytes())
            .verify_slice(&tag)
            .map_err(|_| Refusal::BadMac)?;
        let env: Envelope =
            serde_json::from_str(json).map_err(|e| Refusal::Malformed(e.to_string()))?;
        if env.job != self.job {
            return Err(Refusal::OtherJob(env.job));
        }
        if env.seq != self.seq + 1 {
            return Err(Refusal::Sequence {
                got: env.seq,
                want: self.seq + 1,
            });
        }
        match &self.peer {
            Some(p) if *p != env.from => {
                return Err(Refusal::Sender {
                    got: env.from,
                    want: p.clone(),
                })
            }
            _ => {}
        }
        self.seq = env.seq;
        self.peer = Some(env.from.clone());
        Ok(env)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn pair() -> (Sealer, Opener) {
        let nonce = random().unwrap();
        (
            Sealer::new(SECRET, nonce, "77", "n2"),
            Opener::new(SECRET, nonce, "77"),
        )
    }

    #[test]
    fn a_sealed_line_opens_once_in_order() {
        let (mut s, mut o) = pair();
        let a = s.seal(Body::Heartbeat);
        let b = s.seal(Body::Leaving);
        let env = o.open(&a).unwrap();
        assert_eq!((env.from.as_str(), env.seq), ("n2", 1));
        assert_eq!(o.open(&b).unwrap().body, Body::Leaving);
        assert_eq!(o.open(&a), Err(Refusal::Sequence { got: 1, want: 3 }));
        assert_eq!(o.peer(), Some("n2"));
    }

    #[test]
    fn another_secret_another_connection_or_an_edit_is_refused() {
        let nonce = random().unwrap();
        let mut forged = Sealer::new(b"not the job's secret", nonce, "77", "n2");
        let mut o = Opener::new(SECRET, nonce, "77");
        assert_eq!(o.open(&forged.seal(Body::Leaving)), Err(Refusal::BadMac));
        // The right secret, sealed for another connection's nonce.
        let mut elsewhere = Sealer::new(SECRET, random().unwrap(), "77", "n2");
        assert_eq!(o.open(&elsewhere.seal(Body::Leaving)), Err(Refusal::BadMac));
        let (mut s, mut o) = pair();
        let line = s.seal(Body::Stop {
            worker: "decode[0]".into(),
            generation: 1,
        });
        let edited = line.replace("\"generation\":1", "\"generation\":2");
        assert_ne!(line, edited);
        assert_eq!(o.open(&edited), Err(Refusal::BadMac));
        // Refused lines change nothing: the genuine one still opens.
        assert!(o.open(&line).is_ok());
    }

    #[test]
    fn another_job_and_a_changed_sender_are_refused() {
        let nonce = random().unwrap();
        let mut o = Opener::new(SECRET, nonce, "77");
        let mut other = Sealer::new(SECRET, nonce, "78", "n2");
        assert_eq!(
            o.open(&other.seal(Body::Leaving)),
            Err(Refusal::OtherJob("78".into()))
        );
        let mut n2 = Sealer::new(SECRET, nonce, "77", "n2");
        o.open(&n2.seal(Body::Heartbeat)).unwrap();
        let mut n3 = Sealer::new(SECRET, nonce, "77", "n3");
        n3.seal(Body::Heartbeat); // its second message: sequence 2, as due
        assert!(matches!(
            o.open(&n3.seal(Body::Leaving)),
            Err(Refusal::Sender { .. })
        ));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let (_, mut o) = pair();
        for line in ["", "x", "zz {}", "00 {}", "nonce 12"] {
            assert!(o.open(line).is_err(), "{line}");
        }
        assert!(parse_nonce("nonce zz").is_err());
        assert!(parse_nonce("hello").is_err());
        let n = random().unwrap();
        assert_eq!(parse_nonce(&nonce_line(&n)).unwrap(), n);
    }
}

//! The control connection's sockets: the coordinator's listener and hub (on the infra node),
//! and every node's link to it (the coordinator's node included, over the same TCP path).
//! Tasks on the runtime's thread; what they hear reaches the loop through `deliver`.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;

use super::coordinator::{Coordinator, Input, Note, Output};
use super::wire::{self, Body, Opener, Sealer, MAX_LINE};
use crate::plan::ControlSpec;

/// Connections that have not said their hello yet, at most (or 2 per node of a larger job: its
/// nodes all come at once): a new one past this closes the oldest, so strangers that say
/// nothing cannot keep the job's own nodes out (round 4's M4: 200 silent connections kept a
/// late node from joining for as long as they lasted).
const WAITING: usize = 32;
/// Refusals from one address are said once a minute: the first, then how many more (round 4's
/// M3: 11,325 `control-refused` events in 10 s of garbage connections).
const REFUSALS_WINDOW: Duration = Duration::from_secs(60);
/// File descriptors the coordinator leaves to the rest of mcsup, whatever its connections.
const FD_RESERVE: u64 = 64;

/// How often each side says it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long a write may take before the peer is gone (the peer's silence: `ControlSpec::silent`).
const SILENT: Duration = ControlSpec::SILENT;
/// How long a node keeps trying to reach the coordinator at start (it may start later, and
/// writes the secret first).
pub const REACH_WITHIN: Duration = Duration::from_secs(60);
/// How often a node that has not reached the coordinator within [`REACH_WITHIN`] tries again.
pub const LATE_RETRY: Duration = Duration::from_secs(2);
/// How long the two nonces may take.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// What the loop hears from the control connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// What the coordinator said: `stop`, `start`, `give-up` or `node-failed`.
    Said(Body),
    /// The link to the coordinator is up.
    Joined,
    /// The coordinator has not been reached within [`REACH_WITHIN`] (said once; the tries go on,
    /// and `Joined` follows if it comes): until then, no restart across nodes.
    Unavailable(String),
    /// The link to the coordinator is gone.
    Lost(String),
    /// A message refused: from whom, why.
    Refused { peer: String, why: String },
    /// What the coordinator decided, on its own node: for its events and `worker_restarts.json`.
    Decided(Note),
}

/// What the loop tells the coordinator.
#[derive(Debug)]
pub enum Outgoing {
    /// `down`, `ready`, `failing` or `leaving`.
    Say(Body),
    /// Answered once everything sent before it is written.
    Flush(tokio::sync::oneshot::Sender<()>),
}

pub type Deliver = Box<dyn Fn(Incoming) + Send + Sync>;

/// This node's end: send to the coordinator; dropping it ends the tasks.
pub struct Link {
    tx: UnboundedSender<Outgoing>,
    tasks: Vec<JoinHandle<()>>,
}

impl Link {
    pub fn send(&self, o: Outgoing) {
        let _ = self.tx.send(o);
    }

    /// Wait at most `within` for everything sent so far to be written (or the link to be gone).
    pub async fn flush(&self, within: Duration) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Outgoing::Flush(tx));
        let _ = tokio::time::timeout(within, rx).await;
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Start this node's side: on the coordinator's node the secret, the listener and the hub
/// first; then the link, which says so when it has not joined within `reach` ([`REACH_WITHIN`])
/// and goes on trying. Fails only when the coordinator's node cannot listen or write the secret.
pub fn start(
    spec: &ControlSpec,
    node: &str,
    job: &str,
    hello: wire::Hello,
    reach: Duration,
    deliver: Deliver,
) -> Result<Link, String> {
    let deliver = std::sync::Arc::new(deliver);
    let mut tasks = Vec::new();
    if node == spec.coordinator {
        // Port 0: a free one, published below.
        let std_listener = crate::domain::bind_control_port(&spec.address, spec.port)
            .map_err(|e| {
                format!(
                    "the control port {} cannot be listened on ({e}): set mcsup.control_port to a free port, or leave it out (a free port is chosen)",
                    spec.port
                )
            })?;
        let port = std_listener.local_addr().map_err(|e| e.to_string())?.port();
        let secret = new_secret(&spec.secret, port)?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let listener = TcpListener::from_std(std_listener).map_err(|e| e.to_string())?;
        let d = deliver.clone();
        let served = Served {
            silent: spec.silent,
            secret,
            job: job.to_string(),
            nodes: spec.nodes.clone(),
            me: node.to_string(),
            stores_at_once: spec.stores_at_once,
        };
        tasks.push(tokio::spawn(serve(
            listener,
            served,
            Box::new(move |i| d(i)),
        )));
    }
    let (tx, rx) = unbounded_channel();
    let d = deliver.clone();
    tasks.push(tokio::spawn(link(
        spec.clone(),
        node.to_string(),
        job.to_string(),
        hello,
        reach,
        rx,
        Box::new(move |i| d(i)),
    )));
    Ok(Link { tx, tasks })
}

/// The coordinator's port and secret (32 random bytes in hex) in one line, written 0600 through
/// an exclusive temp file renamed into place (whatever an earlier run or someone else left at the
/// name is replaced, never written through).
fn new_secret(path: &Path, port: u16) -> Result<Vec<u8>, String> {
    let secret = hex::encode(wire::random().map_err(|e| format!("no random bytes: {e}"))?);
    crate::supervisor::status::write_private_atomic(path, format!("{port} {secret}\n").as_bytes())
        .map_err(|e| format!("cannot write the control secret: {e}"))?;
    Ok(secret.into_bytes())
}

/// What [`read_secret`] returns.
type SecretRead = Result<(u16, Vec<u8>), String>;

/// The coordinator's port and the job's secret as another node reads them: a regular file of
/// this user's, readable by nobody else, not through a link, holding a port and 64 hex digits.
pub fn read_secret(path: &Path) -> SecretRead {
    use crate::supervisor::logs::{open_private, OpenMode};
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt;
    let f = open_private(path, OpenMode::Read).map_err(|e| format!("{}: {e}", path.display()))?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not by you (uid {me}): not this job's secret",
            path.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is readable or writable by others (mode {:o}): not this job's secret",
            path.display(),
            m.mode() & 0o777
        ));
    }
    let mut s = String::new();
    f.take(256)
        .read_to_string(&mut s)
        .map_err(|e| e.to_string())?;
    let bad = || format!("{} does not hold a port and a secret", path.display());
    let (port, secret) = s.trim().split_once(' ').ok_or_else(bad)?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0).ok_or_else(bad)?;
    if secret.len() != 2 * wire::RANDOM_BYTES || hex::decode(secret).is_err() {
        return Err(bad());
    }
    Ok((port, secret.as_bytes().to_vec()))
}

/// One line, at most [`MAX_LINE`] bytes, within `within`: `None` at the end of the stream.
async fn read_line(
    r: &mut BufReader<OwnedReadHalf>,
    within: Duration,
) -> Result<Option<String>, String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let n = tokio::time::timeout(
        within,
        r.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf),
    )
    .await
    .map_err(|_| format!("silent for {}", crate::domain::show_secs(within)))?
    .map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if buf.len() > MAX_LINE {
            format!("a line longer than {MAX_LINE} bytes")
        } else {
            "the connection closed inside a line".into()
        });
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| "a line that is not UTF-8".into())
}

/// Aborts its task when dropped (the connection's reader goes with the connection's loop).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The lines of a joined connection, read by a task of their own until the stream ends: a line
/// is never cut short by another branch of the loop's `select!` (a `read_line` future dropped
/// there loses what it had read), and the loop judges silence itself ([`Silence`]). The task
/// ends with the connection, or when the receiver is dropped.
fn lines(
    mut r: BufReader<OwnedReadHalf>,
) -> (
    UnboundedReceiver<Result<Option<String>, String>>,
    JoinHandle<()>,
) {
    let (tx, rx) = unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            // No bound here: the loop's silence watch decides when the peer is gone.
            let line = read_line(&mut r, Duration::MAX).await;
            let last = !matches!(line, Ok(Some(_)));
            if tx.send(line).is_err() || last {
                return;
            }
        }
    });
    (rx, task)
}

/// A peer's silence, counted only in time this side was running: after a pause of this side (a
/// SIGSTOP of the whole job by `scontrol suspend` or gang scheduling, a debugger), the peer gets
/// a fresh `silent` window before it is called gone (round 4's H3: a 15 s stop of the whole job
/// tore it down on resume). Checked on each heartbeat tick.
struct Silence {
    silent: Duration,
    last_heard: tokio::time::Instant,
    last_tick: tokio::time::Instant,
}

/// A heartbeat tick this much later than due means this side did not run meanwhile.
const PAUSED: Duration = Duration::from_secs(3);

impl Silence {
    fn new(silent: Duration, now: tokio::time::Instant) -> Self {
        Silence {
            silent,
            last_heard: now,
            last_tick: now,
        }
    }

    fn heard(&mut self, now: tokio::time::Instant) {
        self.last_heard = now;
    }

    /// On a heartbeat tick: why the peer is gone, if it is.
    fn check(&mut self, now: tokio::time::Instant) -> Result<(), String> {
        let gap = now.saturating_duration_since(self.last_tick);
        self.last_tick = now;
        if gap > HEARTBEAT + PAUSED {
            tracing::info!(
                "this mcsup did not run for {} (stopped, or starved): the job's other nodes get {} to be heard again",
                crate::domain::show_secs(gap),
                crate::domain::show_secs(self.silent)
            );
            self.last_heard = now;
            return Ok(());
        }
        let silent = now.saturating_duration_since(self.last_heard);
        if silent >= self.silent {
            // The period, not the measured gap (a tick lands a few ms past it).
            return Err(format!(
                "silent for {}",
                crate::domain::show_secs(self.silent)
            ));
        }
        Ok(())
    }
}

/// A heartbeat interval that does not burst after a pause (one tick, then the period again).
fn heartbeat() -> tokio::time::Interval {
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    beat
}

async fn write(w: &mut OwnedWriteHalf, line: &str) -> Result<(), String> {
    tokio::time::timeout(SILENT, w.write_all(line.as_bytes()))
        .await
        .map_err(|_| "a write did not go through".to_string())?
        .map_err(|e| e.to_string())
}

/// Both nonces: ours out, theirs in.
async fn handshake(
    stream: TcpStream,
) -> Result<
    (
        BufReader<OwnedReadHalf>,
        OwnedWriteHalf,
        [u8; wire::RANDOM_BYTES],
        [u8; wire::RANDOM_BYTES],
    ),
    String,
> {
    let _ = stream.set_nodelay(true);
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mine = wire::random().map_err(|e| e.to_string())?;
    write(&mut w, &wire::nonce_line(&mine)).await?;
    let line = read_line(&mut r, HANDSHAKE)
        .await?
        .ok_or("closed before its nonce")?;
    let theirs = wire::parse_nonce(&line).map_err(|e| e.to_string())?;
    Ok((r, w, mine, theirs))
}

// ---------------------------------------------------------------------------------------------
// A node's link
// ---------------------------------------------------------------------------------------------

struct Joined {
    /// The coordinator's port, as its file says.
    port: u16,
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
    sealer: Sealer,
    opener: Opener,
}

/// Connect, authenticate and say hello; the coordinator's first message (a heartbeat) proves it
/// holds the same secret. Tried every 250 ms: the coordinator may start later, and a stale
/// secret of an earlier run may be read before the coordinator replaces it. Past `reach` (a
/// minute), `late` hears why once and the tries go on every [`LATE_RETRY`]: the coordinator's
/// node may be slower to start (its image pulled later), and the node joins when it comes.
async fn join(
    spec: &ControlSpec,
    node: &str,
    job: &str,
    hello: &wire::Hello,
    reach: Duration,
    late: &(dyn Fn(String) + Send + Sync),
) -> Joined {
    let started = tokio::time::Instant::now();
    let mut said = false;
    // The secret is read off the loop, bounded: the log directory may be on a file system that
    // stopped answering. A read still stuck is waited for again, never started twice.
    let mut reading: Option<tokio::task::JoinHandle<SecretRead>> = None;
    loop {
        let read = reading.get_or_insert_with(|| {
            let path = spec.secret.clone();
            tokio::task::spawn_blocking(move || read_secret(&path))
        });
        let attempt = match tokio::time::timeout(HANDSHAKE, read).await {
            Ok(r) => {
                reading = None;
                match r.map_err(|e| format!("reading the secret failed: {e}")) {
                    Ok(Ok((port, secret))) => try_join(spec, node, job, hello, port, secret).await,
                    Ok(Err(e)) | Err(e) => Err(e),
                }
            }
            Err(_) => Err(format!(
                "{} did not answer within {} (a hung file system?)",
                spec.secret.display(),
                crate::domain::show_secs(HANDSHAKE)
            )),
        };
        match attempt {
            Ok(j) => return j,
            Err(e) if !said && started.elapsed() >= reach => {
                said = true;
                late(format!(
                    "the coordinator's mcsup ({} at {}, its port in {}) could not be reached within {}: {e}; still trying every {}",
                    spec.coordinator,
                    spec.address,
                    spec.secret.display(),
                    crate::domain::show_secs(reach),
                    crate::domain::show_secs(LATE_RETRY)
                ));
            }
            Err(_) => {}
        }
        tokio::time::sleep(if said {
            LATE_RETRY
        } else {
            Duration::from_millis(250)
        })
        .await;
    }
}

async fn try_join(
    spec: &ControlSpec,
    node: &str,
    job: &str,
    hello: &wire::Hello,
    port: u16,
    secret: Vec<u8>,
) -> Result<Joined, String> {
    let stream = tokio::time::timeout(HANDSHAKE, TcpStream::connect((spec.address.as_str(), port)))
        .await
        .map_err(|_| "the connection was not accepted in time".to_string())?
        .map_err(|e| e.to_string())?;
    let (mut r, mut w, mine, theirs) = handshake(stream).await?;
    let mut sealer = Sealer::new(&secret, theirs, job, node);
    let mut opener = Opener::new(&secret, mine, job);
    write(&mut w, &sealer.seal(hello.body())).await?;
    let line = read_line(&mut r, HANDSHAKE)
        .await?
        .ok_or("the coordinator closed the connection: it holds another secret")?;
    let env = opener.open(&line).map_err(|e| e.to_string())?;
    if env.from != spec.coordinator {
        return Err(format!("{} answered, not the coordinator", env.from));
    }
    Ok(Joined {
        port,
        r,
        w,
        sealer,
        opener,
    })
}

async fn link(
    spec: ControlSpec,
    node: String,
    job: String,
    hello: wire::Hello,
    reach: Duration,
    mut rx: UnboundedReceiver<Outgoing>,
    deliver: Deliver,
) {
    let late = |why: String| deliver(Incoming::Unavailable(why));
    let joining = join(&spec, &node, &job, &hello, reach, &late);
    tokio::pin!(joining);
    // A node that fails before it has joined still says so once it does (the others drain
    // sooner than through the batch script); one that leaves in order has nothing to say.
    let mut failing = None;
    let Joined {
        port,
        r,
        mut w,
        mut sealer,
        mut opener,
    } = loop {
        tokio::select! {
            j = &mut joining => break j,
            o = rx.recv() => match o {
                None | Some(Outgoing::Say(Body::Leaving)) => return,
                Some(Outgoing::Flush(done)) => { let _ = done.send(()); }
                Some(Outgoing::Say(body @ Body::Failing { .. })) => failing = Some(body),
                // The loop says nothing else before it hears `Joined`.
                Some(Outgoing::Say(_)) => {}
            },
        }
    };
    deliver(Incoming::Joined);
    let mut leaving = false;
    if let Some(body) = failing {
        leaving = true;
        if write(&mut w, &sealer.seal(body)).await.is_err() {
            return;
        }
    }
    let mut beat = heartbeat();
    let (mut incoming, reader) = lines(r);
    let _reader = AbortOnDrop(reader);
    let mut silence = Silence::new(spec.silent, tokio::time::Instant::now());
    let why = loop {
        tokio::select! {
            line = incoming.recv() => {
                let line = match line {
                    Some(Ok(Some(l))) => l,
                    Some(Ok(None)) | None => break "the coordinator closed the connection".to_string(),
                    Some(Err(e)) => break e,
                };
                silence.heard(tokio::time::Instant::now());
                match opener.open(&line) {
                    Ok(env) => match env.body {
                        Body::Heartbeat => {}
                        body => deliver(Incoming::Said(body)),
                    },
                    Err(e) => deliver(Incoming::Refused {
                        peer: format!("{}:{port} (the coordinator's address)", spec.address),
                        why: e.to_string(),
                    }),
                }
            }
            o = rx.recv() => {
                let Some(o) = o else { return };
                let body = match o {
                    Outgoing::Flush(done) => { let _ = done.send(()); continue }
                    // After `leaving` or `failing`, only the teardown's tiers are news.
                    Outgoing::Say(body @ Body::Tier { .. }) => body,
                    Outgoing::Say(_) if leaving => continue,
                    Outgoing::Say(body) => body,
                };
                leaving |= matches!(body, Body::Leaving | Body::Failing { .. });
                if let Err(e) = write(&mut w, &sealer.seal(body)).await {
                    break e;
                }
            }
            _ = beat.tick() => {
                if let Err(e) = silence.check(tokio::time::Instant::now()) {
                    break e;
                }
                if let Err(e) = write(&mut w, &sealer.seal(Body::Heartbeat)).await {
                    break e;
                }
            }
        }
    };
    // Said after `leaving` too: the teardown's order across nodes ends with the link.
    deliver(Incoming::Lost(format!(
        "the control connection to the coordinator ({} at {}:{port}) is gone: {why}",
        spec.coordinator, spec.address
    )));
}

// ---------------------------------------------------------------------------------------------
// The coordinator's listener and hub
// ---------------------------------------------------------------------------------------------

enum Hub {
    /// A node's hello on a new connection, and where its messages go.
    Joined {
        node: String,
        hello: wire::Hello,
        tx: UnboundedSender<Body>,
        conn: u64,
    },
    Input(Input),
    Gone {
        node: String,
        conn: u64,
        why: String,
    },
    Refused {
        peer: String,
        why: String,
    },
}

/// What the coordinator's listener serves: the job, its nodes, the secret, its own name.
struct Served {
    /// How long a silent node is still there (`ControlSpec::silent`).
    silent: Duration,
    secret: Vec<u8>,
    job: String,
    nodes: Vec<String>,
    me: String,
    /// `ControlSpec::stores_at_once`.
    stores_at_once: u32,
}

async fn serve(listener: TcpListener, served: Served, deliver: Deliver) {
    let (hub_tx, hub_rx) = unbounded_channel();
    // Dropped with this task (the node's link dropped): the hub and every connection end too.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(hub(
        hub_rx,
        served.nodes.clone(),
        served.stores_at_once,
        served.me.clone(),
        deliver,
    ));
    // Every node's, a reconnecting node's, and a few strangers' at a time (each stranger is
    // closed within the handshake's bound, or sooner to make room): a flood of connections
    // cannot exhaust descriptors, within what the open-files limit leaves (round 4's H4).
    let waiting_most = WAITING.max(2 * served.nodes.len());
    let most = (2 * served.nodes.len() + waiting_most).min(fd_budget());
    let mut over_said = false;
    let mut next = 0u64;
    let mut waiting: VecDeque<(Arc<AtomicU8>, tokio::task::AbortHandle, String)> = VecDeque::new();
    loop {
        let Ok((stream, addr)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        while tasks.try_join_next().is_some() {}
        waiting.retain(|(state, task, _)| {
            state.load(Ordering::Relaxed) != JOINED && !task.is_finished()
        });
        if waiting.len() >= waiting_most {
            let states: Vec<u8> = waiting
                .iter()
                .map(|(s, ..)| s.load(Ordering::Relaxed))
                .collect();
            if let Some((_, task, peer)) = waiting.remove(to_close(&states)) {
                task.abort();
                let _ = hub_tx.send(Hub::Refused {
                    peer,
                    why: format!("closed before its hello: {waiting_most} connections were waiting for theirs, and a newer one came"),
                });
            }
        }
        if tasks.len() > most {
            if !over_said {
                over_said = true;
                let _ = hub_tx.send(Hub::Refused {
                    peer: addr.to_string(),
                    why: format!(
                        "{most} connections are open already: new ones are closed at once until fewer are (said once)"
                    ),
                });
            }
            continue;
        }
        next += 1;
        let state = Arc::new(AtomicU8::new(QUIET));
        let task = tasks.spawn(connection(
            stream,
            Conn {
                silent: served.silent,
                peer: addr.to_string(),
                secret: served.secret.clone(),
                job: served.job.clone(),
                nodes: served.nodes.clone(),
                me: served.me.clone(),
                hub: hub_tx.clone(),
                id: next,
                state: state.clone(),
            },
        ));
        waiting.push_back((state, task, addr.to_string()));
    }
}

/// A waiting connection: it has sent nothing yet, its nonce came (a handshake under way), or it
/// said a valid hello (no longer waiting).
const QUIET: u8 = 0;
const SPOKE: u8 = 1;
const JOINED: u8 = 2;

/// Which waiting connection to close for a newer one: the oldest that has said nothing, else the
/// oldest. A node whose handshake takes tens of milliseconds (a distant or loaded node) outlives
/// strangers that only hold a connection open (the re-run of round 4's M4: through a flood of
/// silent connections, a node 10 ms away took 29.5 s to join).
fn to_close(states: &[u8]) -> usize {
    states.iter().position(|s| *s == QUIET).unwrap_or(0)
}

/// The connections the coordinator may hold: the open-files limit less what is open now and a
/// reserve for the rest of mcsup.
fn fd_budget() -> usize {
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    let open = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    usize::try_from(limit.saturating_sub(open + FD_RESERVE))
        .unwrap_or(usize::MAX)
        .max(8)
}

/// One accepted connection's particulars.
struct Conn {
    /// How long a silent node is still there (`ControlSpec::silent`).
    silent: Duration,
    peer: String,
    secret: Vec<u8>,
    job: String,
    /// The job's nodes: a hello from another name is refused.
    nodes: Vec<String>,
    /// The coordinator's node, the sender of its messages.
    me: String,
    hub: UnboundedSender<Hub>,
    id: u64,
    /// [`QUIET`], [`SPOKE`] once its nonce came, [`JOINED`] once it said a valid hello.
    state: Arc<AtomicU8>,
}

async fn connection(stream: TcpStream, c: Conn) {
    let refuse = |why: String| {
        let _ = c.hub.send(Hub::Refused {
            peer: c.peer.clone(),
            why,
        });
    };
    let (mut r, mut w, mine, theirs) = match handshake(stream).await {
        Ok(x) => x,
        Err(e) => return refuse(format!("no handshake: {e}")),
    };
    c.state.store(SPOKE, Ordering::Relaxed);
    let mut opener = Opener::new(&c.secret, mine, &c.job);
    let first = match read_line(&mut r, HANDSHAKE).await {
        Ok(Some(l)) => l,
        Ok(None) => return refuse("closed before its hello".into()),
        Err(e) => return refuse(e),
    };
    let (node, hello) = match opener.open(&first) {
        Ok(wire::Envelope {
            from,
            body:
                Body::Hello {
                    units,
                    terminal,
                    stores,
                },
            ..
        }) => (
            from,
            wire::Hello {
                units,
                terminal,
                stores,
            },
        ),
        Ok(_) => return refuse("its first message is not a hello".into()),
        Err(e) => return refuse(e.to_string()),
    };
    if !c.nodes.contains(&node) {
        return refuse(format!("{node} is not a node of this job"));
    }
    c.state.store(JOINED, Ordering::Relaxed);
    let mut sealer = Sealer::new(&c.secret, theirs, &c.job, &c.me);
    // The welcome: proof to the node that this end holds the job's secret.
    if write(&mut w, &sealer.seal(Body::Heartbeat)).await.is_err() {
        return;
    }
    let (tx, mut rx) = unbounded_channel();
    let _ = c.hub.send(Hub::Joined {
        node: node.clone(),
        hello,
        tx,
        conn: c.id,
    });
    let mut beat = heartbeat();
    let (mut incoming, reader) = lines(r);
    let _reader = AbortOnDrop(reader);
    let mut silence = Silence::new(c.silent, tokio::time::Instant::now());
    let why = loop {
        tokio::select! {
            line = incoming.recv() => {
                let line = match line {
                    Some(Ok(Some(l))) => l,
                    Some(Ok(None)) | None => break "its connection closed".to_string(),
                    Some(Err(e)) => break e,
                };
                silence.heard(tokio::time::Instant::now());
                match opener.open(&line) {
                    Ok(env) if env.body == Body::Heartbeat => {}
                    Ok(env) => {
                        let _ = c.hub.send(Hub::Input(Input::Said { node: node.clone(), body: env.body }));
                    }
                    // Nothing a refused line says is acted on; the node's own messages go on.
                    Err(e) => refuse(format!("{e} (on {node}'s connection)")),
                }
            }
            b = rx.recv() => {
                let Some(b) = b else { break "replaced by a newer connection".into() };
                if let Err(e) = write(&mut w, &sealer.seal(b)).await {
                    break e;
                }
            }
            _ = beat.tick() => {
                if let Err(e) = silence.check(tokio::time::Instant::now()) {
                    break e;
                }
                if let Err(e) = write(&mut w, &sealer.seal(Body::Heartbeat)).await {
                    break e;
                }
            }
        }
    };
    let _ = c.hub.send(Hub::Gone {
        node,
        conn: c.id,
        why,
    });
}

/// The coordinator's state, fed by every connection; its sends go to the nodes' connections,
/// its records to this node's loop.
async fn hub(
    mut rx: UnboundedReceiver<Hub>,
    job_nodes: Vec<String>,
    stores_at_once: u32,
    me: String,
    deliver: Deliver,
) {
    let mut coordinator = Coordinator::expecting(job_nodes, stores_at_once).at(&me);
    let mut nodes: HashMap<String, (u64, UnboundedSender<Body>)> = HashMap::new();
    let mut refusals = Refusals::default();
    loop {
        for (peer, why) in refusals.due(std::time::Instant::now()) {
            deliver(Incoming::Refused { peer, why });
        }
        let due = [coordinator.next_deadline(), refusals.next_deadline()]
            .into_iter()
            .flatten()
            .min();
        let input = tokio::select! {
            m = rx.recv() => match m {
                None => return,
                Some(Hub::Joined { node, hello, tx, conn }) => {
                    // A node's newer connection replaces its older one (whose task then ends).
                    nodes.insert(node.clone(), (conn, tx));
                    Input::Said { node, body: hello.body() }
                }
                Some(Hub::Input(i)) => i,
                Some(Hub::Gone { node, conn, why }) => {
                    if nodes.get(&node).map(|(c, _)| *c) != Some(conn) {
                        continue;
                    }
                    nodes.remove(&node);
                    Input::Lost { node, why }
                }
                Some(Hub::Refused { peer, why }) => {
                    if let Some((peer, why)) = refusals.add(peer, why, std::time::Instant::now()) {
                        deliver(Incoming::Refused { peer, why });
                    }
                    continue;
                }
            },
            _ = sleep_until(due) => Input::Tick,
        };
        for o in coordinator.handle(input, std::time::Instant::now()) {
            match o {
                Output::Send { to, body } => {
                    if let Some((_, tx)) = nodes.get(&to) {
                        let _ = tx.send(body);
                    }
                }
                Output::Note(n) => deliver(Incoming::Decided(n)),
            }
        }
    }
}

/// Refusals by address: the first of a window is said at once, the rest counted and said as
/// one line when the window ends.
#[derive(Default)]
struct Refusals {
    /// Address (without the port) -> when its window ends, how many more, the last reason.
    windows: HashMap<String, (std::time::Instant, u64, String)>,
}

impl Refusals {
    /// A refusal from `peer`: what to say now, if anything.
    fn add(
        &mut self,
        peer: String,
        why: String,
        now: std::time::Instant,
    ) -> Option<(String, String)> {
        let ip = match peer.rsplit_once(':') {
            Some((ip, port)) if port.chars().all(|c| c.is_ascii_digit()) => ip.to_string(),
            _ => peer.clone(),
        };
        match self.windows.get_mut(&ip) {
            Some((end, more, last)) if now < *end => {
                *more += 1;
                *last = why;
                None
            }
            _ => {
                if self.windows.len() >= 4096 {
                    // Addresses without a second refusal are dropped first: the map stays bounded.
                    self.windows.retain(|_, (_, more, _)| *more > 0);
                }
                self.windows
                    .insert(ip, (now + REFUSALS_WINDOW, 0, String::new()));
                Some((peer, why))
            }
        }
    }

    /// The windows that ended: one line each for those with more refusals.
    fn due(&mut self, now: std::time::Instant) -> Vec<(String, String)> {
        let ended: Vec<String> = self
            .windows
            .iter()
            .filter(|(_, (end, _, _))| *end <= now)
            .map(|(ip, _)| ip.clone())
            .collect();
        let mut out = Vec::new();
        for ip in ended {
            if let Some((_, more, last)) = self.windows.remove(&ip) {
                if more > 0 {
                    out.push((
                        ip.clone(),
                        format!(
                            "{more} more refused from {ip} in the last minute (the last: {last})"
                        ),
                    ));
                }
            }
        }
        out
    }

    fn next_deadline(&self) -> Option<std::time::Instant> {
        self.windows
            .values()
            .filter(|(_, more, _)| *more > 0)
            .map(|(end, _, _)| *end)
            .min()
    }
}

async fn sleep_until(due: Option<std::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;

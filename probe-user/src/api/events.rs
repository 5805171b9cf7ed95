//! `GET /v1/events`: the recent endpoint changes, and with `follow=1` every later one as it
//! happens, one JSON object per line (the events file's lines). The API joins the change
//! stream once; a task keeps the last `RECENT` lines and hands each new one to every follower
//! through a bounded queue of its own, so a follower that stops reading loses lines (and is
//! told how many) instead of holding up anyone else.
use crate::changes::{Batch, Change};
use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

use crate::daemon::{events::EventLine, Control};

/// Lines kept for `GET /v1/events` without `follow`, and as a follower's backlog.
pub(super) const RECENT: usize = 1000;
/// Followers at once: each holds an API connection for as long as it reads.
pub(super) const MAX_FOLLOWERS: usize = 32;
/// Of `MAX_FOLLOWERS`, the places only an operator's follow may take (a unix operator, or a
/// request with the bearer token).
pub(super) const OPERATOR_FOLLOWERS: usize = 2;
/// Lines waiting for one follower before it loses lines.
const FOLLOWER_QUEUE: usize = 4096;
/// Distinct endpoints whose changes may wait for the feed task (changes of one endpoint fold).
const FEED_QUEUE: usize = 1 << 16;

/// One serialized event and the profile it belongs to (for `profile=` filters).
#[derive(Clone)]
struct Line {
    profile: Option<Arc<str>>,
    text: Bytes,
}

impl Line {
    /// The line of an endpoint's change or notice (as the events file writes it); None for a
    /// profile's change, which has none.
    fn of(change: &Change) -> Option<Line> {
        let (line, profile) = match change {
            Change::Endpoint(e) => (EventLine::of(e), &e.profile),
            Change::Notice(n) => (EventLine::notice(n), &n.profile),
            Change::Profile(_) => return None,
        };
        let mut text = serde_json::to_vec(&line).expect("events always encode");
        text.push(b'\n');
        // The recent list keeps a thousand of these: the room the vector grew to was up to
        // twice the line (~1 KiB kept for ~600 bytes of a health change's line).
        text.shrink_to_fit();
        Some(Line {
            profile: Some(profile.clone()),
            text: text.into(),
        })
    }

    /// Said in place of `n` lines that were dropped; matches every filter.
    fn lost(n: u64) -> Line {
        Line {
            profile: None,
            text: lost_line(n),
        }
    }

    fn matches(&self, profile: Option<&str>) -> bool {
        match (&self.profile, profile) {
            (Some(mine), Some(wanted)) => &**mine == wanted,
            _ => true,
        }
    }
}

/// `{"lost":N}`: the one line that is not an event. Clients must expect it.
fn lost_line(n: u64) -> Bytes {
    Bytes::from(format!("{{\"lost\":{n}}}\n"))
}

struct Follower {
    tx: mpsc::Sender<Line>,
    lost: Arc<AtomicU64>,
    profile: Option<String>,
    /// An operator's follow (it holds one of the places kept for operators, or any other).
    operator: bool,
}

#[derive(Default)]
struct State {
    recent: VecDeque<Line>,
    followers: Vec<Follower>,
    /// The daemon stopped: no more lines will come.
    ended: bool,
}

/// The API's end of the change stream.
#[derive(Default)]
pub(super) struct Feed {
    state: Mutex<State>,
}

/// What a `GET /v1/events` asks for.
pub(super) struct Ask<'a> {
    pub lines: usize,
    pub follow: bool,
    pub profile: Option<&'a str>,
    /// An operator's: it may take the places kept for operators.
    pub operator: bool,
}

/// Why a follower was turned away.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TooMany;

impl Feed {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change under the lock is a single push or retain: a panic leaves it whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the task that joins the change stream and feeds `feed` until the daemon stops.
    pub(super) fn start(feed: Arc<Feed>, control: Control) {
        tokio::spawn(async move {
            let changes = match control.subscribe("api-events", FEED_QUEUE).await {
                Ok((_, changes)) => changes,
                Err(e) => {
                    log::debug!("API events: cannot join the change stream: {e}");
                    feed.end();
                    return;
                }
            };
            while let Some(batch) = changes.recv().await {
                feed.take(batch);
            }
            feed.end();
        });
    }

    /// Renders and hands out a batch's lines one at a time: a fleet's first round is one
    /// batch of a change per endpoint, and its lines all at once were ~150 bytes per endpoint
    /// at the daemon's peak, though only the last `RECENT` stay.
    fn take(&self, batch: Batch) {
        if batch.lost > 0 {
            self.push(Line::lost(batch.lost));
        }
        // With no follower, only the lines the recent list keeps are rendered: a start's first
        // round is one batch of a change per endpoint, and rendering all of them (65k lines
        // for 1,000 kept) held the changes, and took the core from the runner, for nothing.
        // One who follows from now on gets the recent list and what comes after, as before.
        let endpoints = batch
            .changes
            .iter()
            .filter(|c| !matches!(***c, Change::Profile(_)))
            .count();
        let mut skip = if self.lock().followers.is_empty() {
            endpoints.saturating_sub(RECENT)
        } else {
            0
        };
        // Each change is let go as soon as its line is out, as the events file's writer does.
        for c in batch.changes {
            if matches!(*c, Change::Profile(_)) {
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            if let Some(line) = Line::of(&c) {
                self.push(line);
            }
        }
    }

    fn push(&self, line: Line) {
        let mut s = self.lock();
        s.followers.retain(|f| {
            if !line.matches(f.profile.as_deref()) {
                return !f.tx.is_closed();
            }
            match f.tx.try_send(line.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    f.lost.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        if s.recent.len() == RECENT {
            s.recent.pop_front();
        }
        s.recent.push_back(line);
    }

    fn end(&self) {
        let mut s = self.lock();
        s.ended = true;
        // Dropping the senders ends every follower's response once it has read its queue.
        s.followers.clear();
    }

    /// The body that answers `ask`: the last `ask.lines` lines, then (following) every new one.
    /// The backlog and the follower's queue are taken under one lock, so no line falls
    /// between them or comes twice.
    pub(super) fn open(&self, ask: &Ask<'_>) -> Result<EventsBody, TooMany> {
        let mut s = self.lock();
        let mut backlog: VecDeque<Bytes> = s
            .recent
            .iter()
            .rev()
            .filter(|l| l.matches(ask.profile))
            .take(ask.lines)
            .map(|l| l.text.clone())
            .collect();
        backlog.make_contiguous().reverse();
        let follow = if ask.follow && !s.ended {
            s.followers.retain(|f| !f.tx.is_closed());
            // Operators may take any place; the others all but the operators' own.
            let full = if ask.operator {
                s.followers.len() >= MAX_FOLLOWERS
            } else {
                s.followers.iter().filter(|f| !f.operator).count() >= MAX_FOLLOWERS - OPERATOR_FOLLOWERS
            };
            if full {
                return Err(TooMany);
            }
            let (tx, rx) = mpsc::channel(FOLLOWER_QUEUE);
            let lost = Arc::new(AtomicU64::new(0));
            s.followers.push(Follower {
                tx,
                lost: lost.clone(),
                profile: ask.profile.map(str::to_string),
                operator: ask.operator,
            });
            Some((rx, lost))
        } else {
            None
        };
        Ok(EventsBody { backlog, follow })
    }
}

/// A response body of event lines: the backlog, then a follower's queue until the daemon stops.
pub(super) struct EventsBody {
    backlog: VecDeque<Bytes>,
    follow: Option<(mpsc::Receiver<Line>, Arc<AtomicU64>)>,
}

impl Body for EventsBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(text) = this.backlog.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(text))));
        }
        let Some((rx, lost)) = &mut this.follow else {
            return Poll::Ready(None);
        };
        // Lines dropped for this follower are reported once its queue, which holds the lines
        // from before the drop, has been read. (Pending alone does not say the queue is empty:
        // tokio's cooperative budget also yields it.)
        match rx.poll_recv(cx) {
            Poll::Ready(Some(line)) => Poll::Ready(Some(Ok(Frame::data(line.text)))),
            Poll::Ready(None) | Poll::Pending if rx.is_empty() && lost.load(Ordering::Relaxed) > 0 => {
                Poll::Ready(Some(Ok(Frame::data(lost_line(lost.swap(0, Ordering::Relaxed))))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.backlog.is_empty() && self.follow.is_none()
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::changes::EndpointState;

    fn batch(profile: &str, endpoints: &[&str], lost: u64) -> Batch {
        Batch {
            changes: endpoints
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let state = EndpointState::tcp("198.18.0.1".parse().unwrap(), 80, true);
                    Arc::new(Change::health(i as u64 + 1, profile, e, state, false))
                })
                .collect(),
            lost,
        }
    }

    fn endpoints_of(text: &[u8]) -> Vec<String> {
        std::str::from_utf8(text)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                match v.get("lost") {
                    Some(n) => format!("lost {n}"),
                    None => format!("{}/{}", v["profile"].as_str().unwrap(), v["endpoint"].as_str().unwrap()),
                }
            })
            .collect()
    }

    async fn read_all(body: EventsBody) -> Vec<String> {
        endpoints_of(&body.collect().await.unwrap().to_bytes())
    }

    #[tokio::test]
    async fn notices_are_lines_too_and_profile_changes_are_not() {
        let feed = Feed::default();
        let state = EndpointState::tcp("198.18.0.1".parse().unwrap(), 443, true);
        let notice = Change::Notice(crate::changes::Notice {
            seq: 2,
            at_unix_ms: 1,
            at_ns: 1,
            kind: crate::changes::ChangeKind::CertExpiring,
            profile: "web".into(),
            endpoint: "soon".into(),
            state,
            cert_not_after: Some(1_797_206_400),
        });
        let profile = Change::Profile(crate::changes::ProfileChange {
            seq: 3,
            at_unix_ms: 1,
            profile: "web".into(),
            from: None,
            to: None,
            fail_open: false,
        });
        let mut b = batch("web", &["a"], 0);
        b.changes.extend([Arc::new(notice), Arc::new(profile)]);
        feed.take(b);
        let ask = Ask {
            lines: 10,
            follow: false,
            profile: None,
            operator: false,
        };
        let body = feed.open(&ask).unwrap().collect().await.unwrap().to_bytes();
        let text = std::str::from_utf8(&body).unwrap();
        assert_eq!(endpoints_of(&body), ["web/a", "web/soon"]);
        assert!(text.contains("\"kind\":\"cert-expiring\""), "{text}");
        assert!(text.contains("\"cert_not_after_unix\":1797206400"), "{text}");
    }

    #[tokio::test]
    async fn recent_lines_are_the_last_ones_of_the_wanted_profile() {
        let feed = Feed::default();
        feed.take(batch("web", &["a", "b", "c"], 0));
        feed.take(batch("dns", &["x"], 0));
        let ask = |lines, profile| Ask {
            lines,
            follow: false,
            profile,
            operator: false,
        };
        assert_eq!(read_all(feed.open(&ask(2, None)).unwrap()).await, ["web/c", "dns/x"]);
        assert_eq!(
            read_all(feed.open(&ask(10, Some("web"))).unwrap()).await,
            ["web/a", "web/b", "web/c"]
        );
        assert!(read_all(feed.open(&ask(0, None)).unwrap()).await.is_empty());
        // A gap in the stream is said where it happened, to every filter.
        feed.take(batch("web", &[], 7));
        assert_eq!(read_all(feed.open(&ask(1, Some("dns"))).unwrap()).await, ["lost 7"]);
    }

    #[tokio::test]
    async fn the_recent_lines_are_bounded() {
        let feed = Feed::default();
        let names: Vec<String> = (0..RECENT + 5).map(|i| format!("e{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        feed.take(batch("web", &refs, 0));
        let all = read_all(
            feed.open(&Ask {
                lines: usize::MAX,
                follow: false,
                profile: None,
                operator: false,
            })
            .unwrap(),
        )
        .await;
        assert_eq!(all.len(), RECENT);
        assert_eq!(all[0], "web/e5");
    }

    #[tokio::test]
    async fn a_follower_gets_the_backlog_then_new_lines_until_the_end() {
        let feed = Feed::default();
        feed.take(batch("web", &["a"], 0));
        let body = feed
            .open(&Ask {
                lines: 5,
                follow: true,
                profile: Some("web"),
                operator: false,
            })
            .unwrap();
        feed.take(batch("dns", &["x"], 0));
        feed.take(batch("web", &["b"], 0));
        feed.end();
        assert_eq!(read_all(body).await, ["web/a", "web/b"]);
        // After the end nobody follows: the backlog alone.
        let after = feed
            .open(&Ask {
                lines: 1,
                follow: true,
                profile: None,
                operator: false,
            })
            .unwrap();
        assert!(after.follow.is_none());
    }

    #[tokio::test]
    async fn a_follower_that_does_not_read_loses_lines_and_is_told_how_many() {
        let feed = Feed::default();
        let body = feed
            .open(&Ask {
                lines: 0,
                follow: true,
                profile: None,
                operator: false,
            })
            .unwrap();
        let names: Vec<String> = (0..FOLLOWER_QUEUE + 3).map(|i| format!("e{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        feed.take(batch("web", &refs, 0));
        feed.end();
        let got = read_all(body).await;
        assert_eq!(got.len(), FOLLOWER_QUEUE + 1);
        assert_eq!(got[FOLLOWER_QUEUE - 1], format!("web/e{}", FOLLOWER_QUEUE - 1));
        assert_eq!(got[FOLLOWER_QUEUE], "lost 3");
    }

    #[tokio::test]
    async fn followers_are_capped_and_a_closed_one_frees_its_place() {
        let feed = Feed::default();
        let ask = Ask {
            lines: 0,
            follow: true,
            profile: None,
            operator: false,
        };
        let mut held: Vec<EventsBody> = (0..MAX_FOLLOWERS - OPERATOR_FOLLOWERS)
            .map(|_| feed.open(&ask).unwrap())
            .collect();
        assert_eq!(feed.open(&ask).err(), Some(TooMany));
        // The places kept for operators are theirs alone.
        let operator = Ask { operator: true, ..ask };
        let mut ops: Vec<EventsBody> = (0..OPERATOR_FOLLOWERS).map(|_| feed.open(&operator).unwrap()).collect();
        assert_eq!(feed.open(&operator).err(), Some(TooMany));
        ops.pop();
        assert_eq!(feed.open(&ask).err(), Some(TooMany), "an operator's place stays one");
        assert!(feed.open(&operator).is_ok());
        held.pop();
        assert!(feed.open(&ask).is_ok());
    }
}

//! The status of many endpoints, fetched from the runner a page at a time and sent as it
//! comes, so that no request ever builds the fleet's document at once, on the runner's thread
//! or here, and the runner serves other requests (and probes) between two pages:
//! - `GET /v1/status?stream=1`: JSON lines, a profile (without its endpoints) and then its
//!   endpoints one per line;
//! - `GET /v1/status` and `GET /v1/status/PROFILE`: the one JSON document (an array of
//!   profiles, or the profile), written piece by piece: what one request holds at a time is a
//!   page and the queue to the client, whatever the fleet's size.
use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

use crate::daemon::Control;

/// Endpoints fetched from the runner per request.
pub(super) const PAGE: usize = 1000;
/// Lines waiting for the client: the stream goes at the reader's pace.
const QUEUE: usize = 64;

/// A body fed by a task through a bounded queue; it ends when the task does.
pub(super) struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn line<T: serde::Serialize>(key: &str, value: &T) -> Bytes {
    let mut out = serde_json::to_vec(&serde_json::json!({ key: value })).expect("views always encode");
    out.push(b'\n');
    out.into()
}

/// The profile's view as JSON around its endpoints: the text up to the array's `[`, and from
/// its `]` on.
/// `view` has no endpoints and no page (`"endpoints":[]` in the text).
fn around_endpoints(view: &crate::daemon::views::ProfileView) -> (Bytes, Bytes) {
    let text = serde_json::to_string(view).expect("views always encode");
    // The first key of this form is the field: the fields before it (name, dialect, ...)
    // cannot hold a quote.
    let key = "\"endpoints\":[";
    let at = text.find(key).map_or(text.len(), |i| i + key.len());
    let (head, tail) = text.split_at(at);
    (Bytes::from(head.to_string()), Bytes::from(tail.to_string()))
}

/// Starts the task that writes `profiles` (from `Control::status_page(.., 0, 0)`: without
/// their endpoints) as the status document, their endpoints fetched a page at a time: an array
/// of them (`array`), or the one profile.
pub(super) fn document(control: Control, profiles: Vec<crate::daemon::views::ProfileView>, array: bool) -> ChannelBody {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(b).await.is_ok() }
        };
        if array && !send(Bytes::from_static(b"[")).await {
            return;
        }
        for (i, mut profile) in profiles.into_iter().enumerate() {
            let total = profile.page.take().map_or(0, |p| p.total);
            profile.endpoints.clear();
            let (head, tail) = around_endpoints(&profile);
            let comma = if i > 0 { "," } else { "" };
            if !send(Bytes::from(comma)).await || !send(head).await {
                return;
            }
            let mut offset = 0;
            while offset < total {
                // A profile a reload removed meanwhile ends its list where it was.
                let Ok(mut views) = control.status_page(Some(&profile.name), offset, PAGE).await else {
                    break;
                };
                let page = views.pop().map(|p| p.endpoints).unwrap_or_default();
                if page.is_empty() {
                    break;
                }
                for (j, e) in page.iter().enumerate() {
                    let mut item = if offset + j > 0 { b",".to_vec() } else { Vec::new() };
                    serde_json::to_writer(&mut item, e).expect("views always encode");
                    if !send(item.into()).await {
                        return;
                    }
                }
                offset += page.len();
            }
            if !send(tail).await {
                return;
            }
        }
        if array {
            send(Bytes::from_static(b"]")).await;
        }
    });
    ChannelBody(rx)
}

/// Starts the task that streams every profile and endpoint.
pub(super) fn status(control: Control) -> ChannelBody {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        // A client that goes away closes the queue: the task stops at its next line.
        let send = |b: Bytes| {
            let tx = tx.clone();
            async move { tx.send(b).await.is_ok() }
        };
        let profiles = match control.status_page(None, 0, 0).await {
            Ok(p) => p,
            Err(e) => {
                send(line("error", &e.to_string())).await;
                return;
            }
        };
        for profile in profiles {
            let total = profile.page.map_or(0, |p| p.total);
            let name = profile.name.clone();
            if !send(line("profile", &profile)).await {
                return;
            }
            let mut offset = 0;
            while offset < total {
                let page = match control.status_page(Some(&name), offset, PAGE).await {
                    Ok(mut v) => v.pop().map(|p| p.endpoints).unwrap_or_default(),
                    // A reload removed the profile meanwhile: say so and go on with the rest.
                    Err(e) => {
                        if !send(line("error", &e.to_string())).await {
                            return;
                        }
                        break;
                    }
                };
                if page.is_empty() {
                    break;
                }
                offset += page.len();
                for e in &page {
                    if !send(line("endpoint", e)).await {
                        return;
                    }
                }
            }
        }
    });
    ChannelBody(rx)
}

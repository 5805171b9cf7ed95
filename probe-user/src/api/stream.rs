//! `GET /v1/status?stream=1`: the whole fleet's status as a stream of JSON lines, a profile
//! (without its endpoints) and then its endpoints one per line, fetched from the runner a page
//! at a time. No request ever builds the fleet's document at once, on the runner's thread or
//! here, and the runner serves other requests (and probes) between two pages.
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

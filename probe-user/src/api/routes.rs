//! What each API request does: the routes, each a request to the daemon through `Control`.
use std::net::IpAddr;

use http_body_util::BodyExt;
use hyper::{body::Incoming, header, Method, Request, Response, StatusCode};

use crate::{
    daemon::{Control, RequestError, SelectQuery},
    status::{AdminAction, Family},
};

use super::{events, limits, query::*, reply::*, stream};

/// Whether `req` is a fleet batch, the one request with a body.
pub(super) fn is_batch(req: &Request<Incoming>) -> bool {
    let segs: Vec<&str> = req.uri().path().split('/').filter(|s| !s.is_empty()).collect();
    req.method() == Method::POST && matches!(segs.as_slice(), ["v1", "profiles", _, "endpoints"])
}

/// `POST /v1/profiles/NAME/endpoints`: a batch of endpoint changes (`crate::fleet`).
pub(super) async fn fleet_batch(req: Request<Incoming>, control: Control, profile: &str) -> Reply {
    let body = match http_body_util::Limited::new(req.into_body(), limits::MAX_BATCH_BYTES as usize)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let mut r = error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the batch could not be read ({e}); a body is at most {} bytes",
                    limits::MAX_BATCH_BYTES
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            return r;
        }
    };
    let batch: crate::fleet::Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body is not a batch ({e}): expected {{\"generation\": N?, \"put\": [ENDPOINT...], \
                     \"set\": [{{\"name\": NAME, KEY: VALUE...}}], \"remove\": [NAME...]}}"
                ),
            )
        }
    };
    match control.fleet(profile, batch).await {
        Err(RequestError::BadBatch(errors)) => {
            let problems: Vec<serde_json::Value> = errors
                .iter()
                .map(|e| serde_json::json!({ "field": e.field, "value": e.value, "problem": e.problem }))
                .collect();
            let body = serde_json::json!({
                "error": RequestError::BadBatch(errors.clone()).to_string(),
                "problems": problems,
            });
            Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(body.to_string().into()))
                .expect("static headers are valid")
        }
        r => json(r),
    }
}

/// The most endpoints one paged status request may ask for.
pub(super) const MAX_PAGE: usize = 10_000;

/// `operator`: the request is an operator's (a unix operator, or it carries the token), who
/// may take the follower places kept for operators.
pub(super) async fn route(req: Request<Incoming>, control: Control, feed: &events::Feed, operator: bool) -> Reply {
    let method = req.method().clone();
    let segments: Vec<String> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let query = req.uri().query().unwrap_or("").to_string();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["v1", "status"]) => match param(&query, "stream").as_deref() {
            None | Some("0" | "false") => match control.status_page(None, 0, 0).await {
                Ok(profiles) => document(control, profiles, true),
                Err(e) => request_error(e),
            },
            Some("1" | "true") => Response::builder()
                .header(header::CONTENT_TYPE, "application/x-ndjson")
                .body(stream::status(control).boxed())
                .expect("static headers are valid"),
            Some(other) => error(
                StatusCode::BAD_REQUEST,
                &format!("stream={other:?}: expected 1 or true (JSON lines, a page at a time), 0 or false"),
            ),
        },
        (&Method::GET, ["v1", "status", profile]) => {
            if param(&query, "offset").is_none() && param(&query, "limit").is_none() {
                return match control.status_page(Some(profile), 0, 0).await {
                    Ok(profiles) => document(control, profiles, false),
                    Err(e) => request_error(e),
                };
            }
            let page = number(&query, "offset", 0, usize::MAX)
                .and_then(|offset| Ok((offset, number(&query, "limit", stream::PAGE, MAX_PAGE)?)));
            let (offset, limit) = match page {
                Ok(p) => p,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why.to_string()),
            };
            json(
                control
                    .status_page(Some(profile), offset, limit)
                    .await
                    .and_then(|mut v| v.pop().ok_or_else(|| RequestError::NoProfile(profile.to_string()))),
            )
        }
        (&Method::GET, ["v1", "status", profile, endpoint]) => json(control.endpoint(profile, endpoint).await),
        (&Method::GET, ["v1", "select", profile]) => {
            let source = param(&query, "source");
            let Some(source) = source.and_then(|s| s.parse::<IpAddr>().ok()) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "source=IP is required, e.g. /v1/select/web?source=192.0.2.1",
                );
            };
            let family = match param(&query, "family").as_deref() {
                None => None,
                Some("ipv4") => Some(Family::Ipv4),
                Some("ipv6") => Some(Family::Ipv6),
                Some(other) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("family={other:?}: expected ipv4 (A records) or ipv6 (AAAA records)"),
                    )
                }
            };
            let select = SelectQuery {
                source,
                region: param(&query, "region"),
                family,
            };
            json(control.select(profile, select).await)
        }
        (&Method::POST, ["v1", "endpoints", profile, endpoint, action]) => {
            let state = match action.parse::<AdminAction>() {
                Ok(action) => action.state(),
                Err(_) => {
                    return error(
                        StatusCode::NOT_FOUND,
                        &format!("actions are {}", AdminAction::NAMES.join(", ")),
                    )
                }
            };
            json(control.set_admin(profile, endpoint, state).await)
        }
        (&Method::GET, ["v1", "profiles", profile, "endpoints"]) => {
            // All of them unless a page is asked for: a control plane reconciles against the
            // whole set (a page at a time for large fleets, each carrying the generation).
            let page = number(&query, "offset", 0, usize::MAX)
                .and_then(|offset| Ok((offset, number(&query, "limit", usize::MAX, usize::MAX)?)));
            match page {
                Ok((offset, limit)) => json(control.fleet_view(profile, offset, limit).await),
                Err(why) => error(StatusCode::BAD_REQUEST, &why.to_string()),
            }
        }
        (&Method::POST, ["v1", "profiles", profile, "endpoints"]) => {
            let profile = profile.to_string();
            fleet_batch(req, control, &profile).await
        }
        (&Method::POST, ["v1", "profiles", profile, action]) => {
            let enabled = match *action {
                "enable" => true,
                "disable" => false,
                _ => return error(StatusCode::NOT_FOUND, "profile actions are enable and disable"),
            };
            json(control.set_profile_enabled(profile, enabled).await)
        }
        (&Method::POST, ["v1", "reload"]) => json(control.reload(None).await),
        (&Method::GET, ["v1", "sinks"]) => json(control.sinks().await),
        (&Method::GET, ["v1", "cluster"]) => json(control.cluster().await),
        (&Method::GET, ["v1", "events"]) => {
            // A misspelt profile would follow silence: name it as /v1/status would.
            if let Some(p) = param(&query, "profile") {
                if let Err(e) = control.status_page(Some(&p), 0, 0).await {
                    return request_error(e);
                }
            }
            events_reply(feed, &query, operator)
        }
        (&Method::GET, ["metrics"]) => match control.metrics().await {
            Ok(text) => Response::builder()
                .header(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
                .body(full(text.into()))
                .expect("static headers are valid"),
            Err(e) => request_error(e),
        },
        (_, ["v1", ..] | ["metrics"]) => error(StatusCode::NOT_FOUND, "no such route; see docs/operations/api.md"),
        _ => error(
            StatusCode::NOT_FOUND,
            "no such route; the API lives under /v1 and /metrics",
        ),
    }
}

/// The status document, streamed (`stream::document`).
pub(super) fn document(control: Control, profiles: Vec<crate::daemon::views::ProfileView>, array: bool) -> Reply {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(stream::document(control, profiles, array).boxed())
        .expect("static headers are valid")
}

/// `GET /v1/events[?lines=N][&follow=1][&profile=P]`: newline-delimited JSON.
pub(super) fn events_reply(feed: &events::Feed, query: &str, operator: bool) -> Reply {
    let follow = match param(query, "follow").as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("follow={other:?}: expected 1 or true (stream new events), 0 or false"),
            )
        }
    };
    let lines = match param(query, "lines") {
        // Without follow: every line kept; following: only what happens from now on.
        None => {
            if follow {
                0
            } else {
                events::RECENT
            }
        }
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n <= events::RECENT => n,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "lines={n:?}: expected a count from 0 to {} (the events kept)",
                        events::RECENT
                    ),
                )
            }
        },
    };
    let profile = param(query, "profile");
    let ask = events::Ask {
        lines,
        follow,
        profile: profile.as_deref(),
        operator,
    };
    match feed.open(&ask) {
        Ok(body) => Response::builder()
            .header(header::CONTENT_TYPE, "application/x-ndjson")
            .body(body.boxed())
            .expect("static headers are valid"),
        Err(events::TooMany) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "{} clients already follow the events ({} places are kept for operators); try again later",
                events::MAX_FOLLOWERS,
                events::OPERATOR_FOLLOWERS
            ),
        ),
    }
}

//! The API's answers: JSON documents and errors, with the status codes they carry.
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{header, Response, StatusCode};

use crate::daemon::RequestError;

/// What every route answers.
pub(super) type Reply = Response<BoxBody<Bytes, Infallible>>;

pub(super) fn json<T: serde::Serialize>(r: Result<T, RequestError>) -> Reply {
    match r {
        Ok(v) => {
            let body = serde_json::to_vec_pretty(&v).expect("views always encode");
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(body.into()))
                .expect("static headers are valid")
        }
        Err(e) => request_error(e),
    }
}

pub(super) fn full(bytes: Bytes) -> BoxBody<Bytes, Infallible> {
    Full::new(bytes).boxed()
}

pub(super) fn request_error(e: RequestError) -> Reply {
    let code = match e {
        RequestError::NoProfile(_) | RequestError::NoEndpoint { .. } | RequestError::NoCluster => StatusCode::NOT_FOUND,
        RequestError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        RequestError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
        RequestError::NotApi(_) | RequestError::Discovered(_) | RequestError::Generation { .. } => StatusCode::CONFLICT,
        RequestError::BadBatch(_) => StatusCode::BAD_REQUEST,
        RequestError::Unsaved(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(code, &e.to_string())
}

pub(super) fn error(code: StatusCode, message: &str) -> Reply {
    let body = serde_json::json!({ "error": message });
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body.to_string().into()))
        .expect("static headers are valid")
}

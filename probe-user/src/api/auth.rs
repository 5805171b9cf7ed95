//! Who may change state through the API: the decision is a pure function of the request's
//! method and headers, the transport's peer and the policy; the unix socket's credentials and
//! the token file are read elsewhere (socket.rs, `Token::from_file`).
use std::path::Path;

use hyper::{header, HeaderMap, Method, StatusCode};

/// The credentials of a unix-socket peer (SO_PEERCRED and SO_PEERGROUPS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PeerCred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The other end of one API connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Peer {
    /// A unix-socket client; `None` when its credentials could not be read.
    Unix(Option<PeerCred>),
    /// A TCP client: nothing is known about it, only the token it sends counts.
    Tcp,
}

/// What the running API allows, fixed at start.
#[derive(Debug)]
pub(super) struct Policy {
    /// Unix socket: members of this group may change state; `None` when the socket is
    /// owner-only.
    pub group: Option<u32>,
    /// The daemon's own effective uid, which owns the socket.
    pub owner: u32,
    /// TCP: the bearer token mutating requests need; `None` refuses them all.
    pub token: Option<Token>,
}

/// Why a request is refused, as the client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// GET and HEAD read; every other method (POST today) may change state.
pub(super) fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// Decides whether a request may go on to routing. Read-only requests always may: whoever can
/// connect may read. A mutating request must look like a script's, not a browser's (JSON
/// content type, no cross-site markers), and then carry the transport's proof: a peer with
/// uid 0, the socket owner's uid or membership of the group on the unix socket; the bearer
/// token over TCP.
pub(super) fn authorize(method: &Method, headers: &HeaderMap, peer: &Peer, policy: &Policy) -> Result<(), Refusal> {
    if !is_mutating(method) {
        return Ok(());
    }
    cross_site(headers)?;
    json_content_type(headers)?;
    match peer {
        Peer::Unix(cred) => unix_peer(cred.as_ref(), policy),
        Peer::Tcp => bearer(headers, policy.token.as_ref()),
    }
}

/// A browser marks what a page on another site sends; scripts and the CLI send neither header.
fn cross_site(headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!(
                "a request with an Origin header ({}) comes from a browser page; the API does not take changes from browsers",
                String::from_utf8_lossy(origin.as_bytes())
            ),
        ));
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.as_bytes();
        if !site.eq_ignore_ascii_case(b"same-origin") && !site.eq_ignore_ascii_case(b"none") {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!(
                    "Sec-Fetch-Site: {} marks a cross-site browser request; only same-origin or none may change state",
                    String::from_utf8_lossy(site)
                ),
            ));
        }
    }
    Ok(())
}

/// HTML forms can only send text/plain, urlencoded or multipart bodies without a preflight.
fn json_content_type(headers: &HeaderMap) -> Result<(), Refusal> {
    let value = headers
        .get(header::CONTENT_TYPE)
        .map(hyper::header::HeaderValue::as_bytes)
        .unwrap_or_default();
    let essence = value.split(|b| *b == b';').next().unwrap_or_default().trim_ascii();
    if essence.eq_ignore_ascii_case(b"application/json") {
        return Ok(());
    }
    let shown = if value.is_empty() {
        "none".to_string()
    } else {
        String::from_utf8_lossy(value).into_owned()
    };
    Err(Refusal::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("Content-Type {shown} is refused: requests that change state need Content-Type: application/json"),
    ))
}

/// Whether `peer` may change state without a token: root, the daemon's uid or the socket's
/// group on the unix socket. Such a peer may take the API's place kept for operators.
pub(super) fn is_operator(peer: &Peer, policy: &Policy) -> bool {
    matches!(peer, Peer::Unix(cred) if unix_peer(cred.as_ref(), policy).is_ok())
}

/// Whether a request from `peer` could carry the bearer token that makes it an operator's (a
/// TCP peer, with a token configured).
pub(super) fn may_hold_token(peer: &Peer, policy: &Policy) -> bool {
    matches!(peer, Peer::Tcp) && policy.token.is_some()
}

/// Whether a request from `peer` with `headers` carries the right bearer token (TCP only: a
/// unix peer's credentials decide, not a token).
pub(super) fn holds_token(headers: &HeaderMap, peer: &Peer, policy: &Policy) -> bool {
    may_hold_token(peer, policy) && bearer(headers, policy.token.as_ref()).is_ok()
}

fn unix_peer(cred: Option<&PeerCred>, policy: &Policy) -> Result<(), Refusal> {
    let who = match policy.group {
        Some(g) => format!(
            "uid 0, uid {} (the daemon) or a member of group {g} (daemon.api_socket_group)",
            policy.owner
        ),
        None => format!(
            "uid 0 or uid {} (the daemon); the socket has no group (daemon.api_socket_group)",
            policy.owner
        ),
    };
    let Some(cred) = cred else {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            format!("the peer's credentials could not be read; changes need {who}"),
        ));
    };
    let member = policy.group.is_some_and(|g| cred.gid == g || cred.groups.contains(&g));
    if cred.uid == 0 || cred.uid == policy.owner || member {
        return Ok(());
    }
    Err(Refusal::new(
        StatusCode::FORBIDDEN,
        format!(
            "uid {} (gid {}) may read but not change state: changes need {who}",
            cred.uid, cred.gid
        ),
    ))
}

fn bearer(headers: &HeaderMap, token: Option<&Token>) -> Result<(), Refusal> {
    let Some(token) = token else {
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "changes over TCP are off: set daemon.api_token_file and send Authorization: Bearer <token> \
             (probed ... --token-file FILE), or use the unix socket",
        ));
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .map(hyper::header::HeaderValue::as_bytes)
        .and_then(|v| {
            let (scheme, rest) = v.split_at_checked(7)?;
            scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
        });
    match sent {
        Some(sent) if token.matches(sent) => Ok(()),
        Some(_) => Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "the bearer token is wrong (it must be the content of daemon.api_token_file)",
        )),
        None => Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "changes over TCP need Authorization: Bearer <token>, the content of daemon.api_token_file \
             (probed ... --token-file FILE)",
        )),
    }
}

/// The shortest token accepted: 16 printable characters, 96 bits or more if random.
pub(super) const MIN_TOKEN_LEN: usize = 16;
pub(super) const MAX_TOKEN_LEN: usize = 4096;

/// A bearer token; never printed.
pub(super) struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({} bytes)", self.0.len())
    }
}

/// Why a token file is refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("read the API token file {} (daemon.api_token_file)", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the API token file {} (daemon.api_token_file) is {problem}", path.display())]
    Refused { path: std::path::PathBuf, problem: String },
}

/// What is wrong with a token file's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadToken {
    #[error(
        "{0} characters long: a token is {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} printable characters, e.g. \
         `openssl rand -hex 32`"
    )]
    Length(usize),
    #[error("not one line of printable ASCII without spaces (what an HTTP header can carry)")]
    Characters,
}

impl Token {
    /// Parses the content of a token file: one line of printable ASCII, surrounding
    /// whitespace ignored.
    pub(super) fn parse(text: &[u8]) -> Result<Token, BadToken> {
        let t = text.trim_ascii();
        if t.len() < MIN_TOKEN_LEN || t.len() > MAX_TOKEN_LEN {
            return Err(BadToken::Length(t.len()));
        }
        if !t.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(BadToken::Characters);
        }
        Ok(Token(t.to_vec()))
    }

    /// Reads `path`, which only its owner (root or the daemon's user) may read or write.
    pub(super) fn from_file(path: &Path, owner: u32) -> Result<Token, TokenError> {
        let refused = |problem: String| TokenError::Refused {
            path: path.to_path_buf(),
            problem,
        };
        let text = crate::secret::read_private(path, owner, MAX_TOKEN_LEN as u64 + 64).map_err(|e| match e {
            crate::secret::SecretFileError::Read(source) => TokenError::Read {
                path: path.to_path_buf(),
                source,
            },
            crate::secret::SecretFileError::Refused(problem) => refused(problem),
        })?;
        Token::parse(&text).map_err(|e| refused(e.to_string()))
    }

    /// Compares in time that depends on the token's length only, not on where `sent` differs.
    pub(super) fn matches(&self, sent: &[u8]) -> bool {
        let mut diff = u8::from(sent.len() != self.0.len());
        for (i, want) in self.0.iter().enumerate() {
            let got = sent.get(i).copied().unwrap_or(0);
            diff |= std::hint::black_box(want ^ got);
        }
        std::hint::black_box(diff) == 0
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123";

    fn policy(group: Option<u32>, token: Option<&str>) -> Policy {
        Policy {
            group,
            owner: 997,
            token: token.map(|t| Token::parse(t.as_bytes()).unwrap()),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn json() -> HeaderMap {
        headers(&[("content-type", "application/json")])
    }

    fn unix(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer::Unix(Some(PeerCred {
            uid,
            gid,
            groups: groups.to_vec(),
        }))
    }

    fn status(r: Result<(), Refusal>) -> u16 {
        r.map_or_else(|e| e.status.as_u16(), |()| 200)
    }

    #[test]
    fn reads_are_open_to_everyone_who_connects() {
        let p = policy(Some(4242), None);
        let none = HeaderMap::new();
        for m in [Method::GET, Method::HEAD] {
            assert_eq!(status(authorize(&m, &none, &unix(65534, 65534, &[]), &p)), 200);
            assert_eq!(status(authorize(&m, &none, &Peer::Tcp, &p)), 200);
            assert_eq!(status(authorize(&m, &none, &Peer::Unix(None), &p)), 200);
        }
    }

    #[test]
    fn unix_writes_need_root_the_owner_or_the_group() {
        let p = policy(Some(4242), None);
        let post = |peer| status(authorize(&Method::POST, &json(), &peer, &p));
        assert_eq!(post(unix(0, 0, &[])), 200);
        assert_eq!(post(unix(997, 997, &[])), 200, "the daemon's own user");
        assert_eq!(post(unix(1000, 4242, &[])), 200, "primary group");
        assert_eq!(post(unix(1000, 1000, &[10, 4242])), 200, "supplementary group");
        assert_eq!(post(unix(1000, 1000, &[10, 4243])), 403);
        assert_eq!(post(unix(65534, 65534, &[])), 403);
        assert_eq!(post(Peer::Unix(None)), 403, "unknown credentials fail closed");
        for m in [Method::PUT, Method::DELETE, Method::PATCH, Method::OPTIONS] {
            assert_eq!(status(authorize(&m, &json(), &unix(65534, 65534, &[]), &p)), 403, "{m}");
        }
        let e = authorize(&Method::POST, &json(), &unix(65534, 65534, &[]), &p).unwrap_err();
        assert!(
            e.message.contains("uid 65534") && e.message.contains("group 4242"),
            "{}",
            e.message
        );
    }

    #[test]
    fn without_a_group_only_root_and_the_owner_write() {
        let p = policy(None, None);
        let post = |peer| status(authorize(&Method::POST, &json(), &peer, &p));
        assert_eq!(post(unix(0, 0, &[])), 200);
        assert_eq!(post(unix(997, 997, &[])), 200);
        assert_eq!(post(unix(1000, 4242, &[4242])), 403);
    }

    #[test]
    fn tcp_writes_need_the_token() {
        let off = policy(None, None);
        let on = policy(None, Some(TOKEN));
        let post = |h: HeaderMap, p: &Policy| authorize(&Method::POST, &h, &Peer::Tcp, p);
        let with = |auth: &str| headers(&[("content-type", "application/json"), ("authorization", auth)]);
        let e = post(with(&format!("Bearer {TOKEN}")), &off).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains("api_token_file"), "{}", e.message);
        assert_eq!(status(post(json(), &on)), 403);
        assert_eq!(status(post(with("Bearer 0123456789abcdef0124"), &on)), 403);
        assert_eq!(status(post(with("Bearer 0123456789abcdef012"), &on)), 403, "a prefix");
        assert_eq!(status(post(with(&format!("Bearer {TOKEN}0")), &on)), 403, "longer");
        assert_eq!(status(post(with(&format!("Basic {TOKEN}")), &on)), 403);
        assert_eq!(status(post(with(&format!("Bearer {TOKEN}")), &on)), 200);
        assert_eq!(status(post(with(&format!("bearer  {TOKEN} ")), &on)), 200);
        // A unix peer's token counts for nothing: its credentials decide.
        let p = policy(None, Some(TOKEN));
        let h = with(&format!("Bearer {TOKEN}"));
        assert_eq!(status(authorize(&Method::POST, &h, &unix(65534, 65534, &[]), &p)), 403);
    }

    #[test]
    fn browser_requests_are_refused() {
        let p = policy(None, None);
        let root = unix(0, 0, &[]);
        let post = |h: &[(&'static str, &str)]| status(authorize(&Method::POST, &headers(h), &root, &p));
        assert_eq!(post(&[("content-type", "application/json")]), 200);
        assert_eq!(post(&[("content-type", "Application/JSON; charset=utf-8")]), 200);
        assert_eq!(post(&[]), 415);
        assert_eq!(post(&[("content-type", "text/plain")]), 415);
        assert_eq!(post(&[("content-type", "application/x-www-form-urlencoded")]), 415);
        assert_eq!(post(&[("content-type", "multipart/form-data; boundary=x")]), 415);
        assert_eq!(post(&[("content-type", "application/jsonx")]), 415);
        let cross = [("content-type", "application/json"), ("origin", "http://evil.example")];
        assert_eq!(post(&cross), 403);
        assert_eq!(post(&[("content-type", "application/json"), ("origin", "null")]), 403);
        for (site, want) in [
            ("cross-site", 403),
            ("same-site", 403),
            ("same-origin", 200),
            ("none", 200),
        ] {
            assert_eq!(
                post(&[("content-type", "application/json"), ("sec-fetch-site", site)]),
                want,
                "{site}"
            );
        }
    }

    #[test]
    fn token_content_is_checked() {
        assert!(Token::parse(b"short").is_err());
        assert!(Token::parse(b"0123456789abcdef with space").is_err());
        assert!(Token::parse(&[b'a'; MAX_TOKEN_LEN + 1]).is_err());
        let t = Token::parse(b"  0123456789abcdef0123\n").unwrap();
        assert!(t.matches(TOKEN.as_bytes()));
        assert!(!t.matches(b""));
        assert_eq!(format!("{t:?}"), "Token(20 bytes)");
    }

    #[test]
    fn token_file_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("probed-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&path).unwrap());
        for (mode, ok) in [
            (0o600, true),
            (0o400, true),
            (0o640, false),
            (0o604, false),
            (0o620, false),
        ] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let r = Token::from_file(&path, owner);
            assert_eq!(r.is_ok(), ok, "mode {mode:o}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains(&format!("mode 0{mode:o}")), "{e}");
            }
        }
        assert!(Token::from_file(&dir.join("missing"), owner).is_err());
        assert!(Token::from_file(&dir, owner).is_err(), "a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

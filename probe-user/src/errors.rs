//! Errors as people read them: an error and its causes on one line (`e: cause: cause`), for
//! logs and API replies that show one line where `anyhow`'s `{:#}` is not at hand.
use std::error::Error;

/// `e` and each of its sources, joined by ": ".
pub fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("read the file")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_follow_the_error() {
        let e = Outer(std::io::Error::new(std::io::ErrorKind::NotFound, "gone"));
        assert_eq!(super::chain(&e), "read the file: gone");
    }
}

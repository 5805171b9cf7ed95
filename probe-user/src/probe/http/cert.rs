//! The one thing a TLS check reads from the server's certificate itself: when it expires.
//! A certificate is DER (RFC 5280); its validity is the fifth field of the to-be-signed part,
//! after an optional version, the serial number, the signature algorithm and the issuer. This
//! walks there and reads `notAfter`, a UTCTime (two-digit year, 1950-2049) or a
//! GeneralizedTime (four digits). Nothing else is parsed, and anything unexpected gives None.

/// One DER element at the start of `input`: its tag, its contents and what follows it.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    // Tags above 30 take more bytes; none of the elements walked here uses one.
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The certificate's `notAfter`, in seconds since the Unix epoch.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (SEQUENCE, certificate, _) = element(der)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let mut rest = tbs;
    let (tag, _, after) = element(rest)?;
    if tag == VERSION {
        rest = after;
    }
    // serialNumber, signature, issuer: skipped whatever they hold.
    for _ in 0..3 {
        rest = element(rest)?.2;
    }
    let (SEQUENCE, validity, _) = element(rest)? else {
        return None;
    };
    let (_, _, after_not_before) = element(validity)?;
    let (tag, time, _) = element(after_not_before)?;
    parse_time(tag, time)
}

/// `YYMMDDHHMMSSZ` (UTCTime) or `YYYYMMDDHHMMSSZ` (GeneralizedTime), as RFC 5280 requires them.
fn parse_time(tag: u8, text: &[u8]) -> Option<i64> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |s: &[u8]| s.iter().fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
    let (year, rest) = match (tag, digits.len()) {
        (UTC_TIME, 12) => {
            let yy = num(&digits[..2]);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (GENERALIZED_TIME, 14) => (num(&digits[..4]), &digits[4..]),
        _ => return None,
    };
    let (month, day) = (num(&rest[..2]), num(&rest[2..4]));
    let (hour, minute, second) = (num(&rest[4..6]), num(&rest[6..8]), num(&rest[8..10]));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(crate::calendar::days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_until(year: i32, month: u8, day: u8) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["www.example.test".to_string()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(year, month, day);
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn reads_not_after_in_both_time_forms() {
        // 2030: a UTCTime; 2099: a GeneralizedTime (from 2050 on).
        assert_eq!(not_after(&cert_until(2030, 6, 15)), Some(1_907_712_000));
        assert_eq!(not_after(&cert_until(2099, 1, 1)), Some(4_070_908_800));
        assert_eq!(not_after(&cert_until(2024, 2, 29)), Some(1_709_164_800));
    }

    #[test]
    fn anything_else_is_none() {
        assert_eq!(not_after(&[]), None);
        assert_eq!(not_after(&[0x30, 0x03, 0x02, 0x01]), None);
        let mut cut = cert_until(2030, 1, 1);
        cut.truncate(40);
        assert_eq!(not_after(&cut), None);
        assert_eq!(parse_time(UTC_TIME, b"301301000000Z"), None);
        assert_eq!(parse_time(UTC_TIME, b"3001010000Z"), None);
        assert_eq!(parse_time(GENERALIZED_TIME, b"20300101000000"), None);
    }

    #[test]
    fn two_digit_years_follow_rfc_5280() {
        assert_eq!(parse_time(UTC_TIME, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(parse_time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
    }
}

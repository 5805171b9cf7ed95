//! Test certificates made on the spot (rcgen): a CA, and server or client certificates it
//! signs, as PEM for the servers and for probed's configuration.
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A certificate and its key, as PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A CA: its certificate (to sign with) and key.
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: KeyPair,
}

pub fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// A certificate for `name` from `ca`, valid from 2020 until 1 January of `not_after`.
pub fn leaf(ca: &Ca, name: &str, not_after: i32) -> Pem {
    leaf_until(ca, name, (not_after, 1, 1))
}

/// A certificate for `name` from `ca`, valid from 2020 until the day `(year, month, day)`.
pub fn leaf_until(ca: &Ca, name: &str, (year, month, day): (i32, u8, u8)) -> Pem {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// The calendar day (UTC) `days` from now, as `(year, month, day)`.
pub fn days_from_now(days: u64) -> (i32, u8, u8) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (year, month, day) = probed::calendar::civil_from_days(i64::try_from(now / 86_400 + days).unwrap());
    (
        i32::try_from(year).unwrap(),
        u8::try_from(month).unwrap(),
        u8::try_from(day).unwrap(),
    )
}

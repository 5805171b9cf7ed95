use super::*;

fn region(name: &str, nets: &[&str], countries: &[&str], continents: &[&str]) -> DnsRegion {
    DnsRegion {
        name: name.into(),
        subnets: nets.iter().map(|n| n.parse().unwrap()).collect(),
        countries: countries.iter().map(|c| (*c).to_string()).collect(),
        continents: continents.iter().map(|c| (*c).to_string()).collect(),
    }
}

#[test]
fn the_most_specific_subnet_decides() {
    let regions = Regions::new(
        &[
            region("eu", &["198.18.0.0/15", "2001:2::/48"], &[], &[]),
            region("eu-west", &["198.18.10.0/24"], &[], &[]),
        ],
        None,
    );
    let at = |s: &str| regions.region_of(s.parse().unwrap());
    assert_eq!(at("198.18.10.7"), Some("eu-west"));
    assert_eq!(at("198.19.1.1"), Some("eu"));
    assert_eq!(at("2001:2::9"), Some("eu"));
    assert_eq!(at("::ffff:198.18.10.7"), Some("eu-west"), "mapped IPv4");
    assert_eq!(at("192.0.2.1"), None);
    assert_eq!(Regions::default().region_of("198.18.10.7".parse().unwrap()), None);
}

/// A database written here in the MaxMind format, as GeoLite2-Country lays its records out.
fn db() -> Arc<GeoDb> {
    #[derive(serde::Serialize)]
    struct Code {
        iso_code: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Continent {
        code: &'static str,
    }
    #[derive(serde::Serialize)]
    struct Record {
        country: Code,
        continent: Continent,
    }
    let mut w = mmdb_writer::Writer::new("GeoLite2-Country");
    for (net, country, continent) in [
        ("198.18.50.0/24", "DE", "EU"),
        ("198.18.51.0/24", "FR", "EU"),
        ("198.18.60.0/24", "US", "NA"),
        ("2001:2:60::/48", "US", "NA"),
    ] {
        let record = Record {
            country: Code { iso_code: country },
            continent: Continent { code: continent },
        };
        w.insert(net.parse::<IpNet>().unwrap(), &record).unwrap();
    }
    Arc::new(maxminddb::Reader::from_source(w.to_bytes().unwrap()).unwrap())
}

#[test]
fn a_geoip_database_maps_countries_then_continents_after_subnets() {
    let regions = Regions::new(
        &[
            region("de", &["198.18.51.0/25"], &["DE"], &[]),
            region("europe", &[], &[], &["EU"]),
            region("us", &[], &["US"], &[]),
        ],
        Some(db()),
    );
    let at = |s: &str| regions.region_of(s.parse().unwrap());
    assert_eq!(at("198.18.50.1"), Some("de"), "by country");
    assert_eq!(
        at("198.18.51.200"),
        Some("europe"),
        "FR is only in the continent's region"
    );
    assert_eq!(at("198.18.51.1"), Some("de"), "a subnet wins over the database");
    assert_eq!(at("198.18.60.1"), Some("us"));
    assert_eq!(at("2001:2:60::1"), Some("us"));
    assert_eq!(at("192.0.2.1"), None, "not in the database: world");
}

//! Which region a source address is in, for geographic routing: the `[[dns.region]]` subnets,
//! most specific prefix first; then, with a GeoIP database, the region that lists the source's
//! country, else its continent. The DNS server and `GET /v1/select` both ask this table, so
//! they route a source alike. Pure once built (the database is read into memory at start and
//! reload).
use std::{collections::HashMap, net::IpAddr, path::Path, sync::Arc};

use ipnet::IpNet;

use crate::config::DnsRegion;

/// A MaxMind-format database, read whole into memory.
pub type GeoDb = maxminddb::Reader<Vec<u8>>;

/// Reads and checks a GeoIP database; the error says which file and why.
pub fn load_db(path: &Path) -> Result<Arc<GeoDb>, GeoDbError> {
    maxminddb::Reader::open_readfile(path)
        .map(Arc::new)
        .map_err(|source| GeoDbError {
            path: path.to_path_buf(),
            source,
        })
}

/// A GeoIP database that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("dns.geoip_db {}", path.display())]
pub struct GeoDbError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: maxminddb::MaxMindDbError,
}

#[derive(Clone, Default)]
pub struct Regions {
    /// Longest prefix first, so the first match is the most specific.
    nets: Vec<(IpNet, Arc<str>)>,
    countries: HashMap<String, Arc<str>>,
    continents: HashMap<String, Arc<str>>,
    db: Option<Arc<GeoDb>>,
}

impl std::fmt::Debug for Regions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Regions")
            .field("nets", &self.nets)
            .field("countries", &self.countries)
            .field("continents", &self.continents)
            .field("db", &self.db.is_some())
            .finish()
    }
}

impl PartialEq for Regions {
    fn eq(&self, other: &Self) -> bool {
        self.nets == other.nets
            && self.countries == other.countries
            && self.continents == other.continents
            && self.db.as_ref().map(Arc::as_ptr) == other.db.as_ref().map(Arc::as_ptr)
    }
}

impl Regions {
    pub fn new(regions: &[DnsRegion], db: Option<Arc<GeoDb>>) -> Self {
        let mut nets: Vec<(IpNet, Arc<str>)> = Vec::new();
        let mut countries = HashMap::new();
        let mut continents = HashMap::new();
        for r in regions {
            let name: Arc<str> = Arc::from(r.name.as_str());
            nets.extend(r.subnets.iter().map(|n| (*n, name.clone())));
            countries.extend(r.countries.iter().map(|c| (c.clone(), name.clone())));
            continents.extend(r.continents.iter().map(|c| (c.clone(), name.clone())));
        }
        nets.sort_by_key(|(n, _)| std::cmp::Reverse(n.prefix_len()));
        Regions {
            nets,
            countries,
            continents,
            db,
        }
    }

    /// The region holding `source`; None sends the query to the `world` endpoint.
    pub fn region_of(&self, source: IpAddr) -> Option<&str> {
        let source = canonical(source);
        if let Some((_, name)) = self.nets.iter().find(|(n, _)| n.contains(&source)) {
            return Some(name);
        }
        let (country, continent) = self.locate(source)?;
        country
            .and_then(|c| self.countries.get(&c))
            .or_else(|| continent.and_then(|c| self.continents.get(&c)))
            .map(|name| &**name)
    }

    /// The source's country and continent codes, as the database has them.
    fn locate(&self, source: IpAddr) -> Option<(Option<String>, Option<String>)> {
        let db = self.db.as_ref()?;
        let found = db.lookup(source).ok()?;
        let record: maxminddb::geoip2::Country<'_> = found.decode().ok()??;
        Some((
            record.country.iso_code.map(str::to_string),
            record.continent.code.map(str::to_string),
        ))
    }
}

/// An IPv4-mapped IPv6 source (a dual-stack socket's view of an IPv4 client) as the IPv4
/// address it is.
pub fn canonical(source: IpAddr) -> IpAddr {
    source.to_canonical()
}

#[cfg(test)]
mod tests;

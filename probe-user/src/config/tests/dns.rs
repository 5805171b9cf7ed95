//! `[dns]` and the profiles' `dns_name`/`dns_ttl` tests.
use super::*;

const DNS: &str = "[dns]\nlisten = [\"198.18.0.1:53\", \"[2001:2::1]:53\"]\nzone = \"TM.Example\"\n";

#[test]
fn defaults_and_names() {
    let c = ok(&format!("{DNS}\n{}", cfg("tm", "dns_ttl = \"5s\"", "", "")));
    let dns = c.dns.as_ref().unwrap();
    assert_eq!(dns.zone, "tm.example.", "absolute and lower case");
    assert_eq!(dns.listen.len(), 2);
    assert_eq!((dns.ttl, dns.negative_ttl), (30, 30));
    let ns1 = NameServer {
        name: "ns1.tm.example.".into(),
        addresses: vec!["198.18.0.1".parse().unwrap(), "2001:2::1".parse().unwrap()],
    };
    assert_eq!(dns.nameservers, [ns1], "ns1.<zone> at the listen addresses");
    assert_eq!(dns.rate_limit, DnsRateLimit::default());
    assert_eq!(dns.tcp, DnsTcp::default());
    assert_eq!(dns.name_of(&c.profiles[0]), "web.tm.example.");
    assert_eq!(c.profiles[0].dns_ttl, Some(5));
    let c = ok(&format!("{DNS}\n{}", cfg("tm", "dns_name = \"WWW.eu\"", "", "")));
    assert_eq!(c.dns.as_ref().unwrap().name_of(&c.profiles[0]), "www.eu.tm.example.");
    assert!(ok(&cfg("tm", "", "", "")).dns.is_none());
}

rule!(listen_missing, "[dns]\nzone = \"tm.example\"", "dns.listen");
rule!(
    listen_garbage,
    "[dns]\nlisten = [\"198.18.0.1\"]\nzone = \"tm.example\"",
    "dns.listen[0]"
);
rule!(
    listen_twice,
    "[dns]\nlisten = [\"198.18.0.1:53\", \"198.18.0.1:53\"]\nzone = \"tm.example\"",
    "dns.listen[1]"
);
rule!(zone_missing, "[dns]\nlisten = [\"198.18.0.1:53\"]", "dns.zone");
rule!(
    zone_garbage,
    "[dns]\nlisten = [\"198.18.0.1:53\"]\nzone = \"tm_example\"",
    "dns.zone"
);
rule!(ttl_fraction, format!("{DNS}ttl = \"1500ms\""), "dns.ttl");
rule!(ttl_too_long, format!("{DNS}ttl = \"86401s\""), "dns.ttl");
rule!(
    negative_ttl_garbage,
    format!("{DNS}negative_ttl = \"soon\""),
    "dns.negative_ttl"
);
rule!(
    nameservers_old_list,
    format!("{DNS}nameservers = [\"ns1.tm.example.\"]"),
    "dns.nameservers"
);
rule!(
    nameserver_default_on_wildcards,
    "[dns]\nlisten = [\"0.0.0.0:53\"]\nzone = \"tm.example\"",
    "dns.nameserver"
);
rule!(
    nameserver_inside_without_addresses,
    format!("{DNS}[[dns.nameserver]]\nname = \"ns1.tm.example.\""),
    "dns.nameserver[0].addresses"
);
rule!(
    nameserver_outside_with_addresses,
    format!("{DNS}[[dns.nameserver]]\nname = \"ns1.other.example.\"\naddresses = [\"198.18.0.1\"]"),
    "dns.nameserver[0].addresses"
);
rule!(
    nameserver_bad_address,
    format!("{DNS}[[dns.nameserver]]\nname = \"ns1.tm.example.\"\naddresses = [\"198.18.0.1\", \"0.0.0.0\"]"),
    "dns.nameserver[0].addresses[1]"
);
rule!(
    nameserver_twice,
    format!("{DNS}[[dns.nameserver]]\nname = \"ns.other.example\"\n[[dns.nameserver]]\nname = \"NS.other.example.\""),
    "dns.nameserver[1].name"
);
rule!(
    nameserver_is_a_profile,
    format!(
        "{DNS}[[dns.nameserver]]\nname = \"web.tm.example.\"\naddresses = [\"198.18.0.1\"]\n{}",
        cfg("tm", "", "", "")
    ),
    "profile[0].dns_name"
);
rule!(
    rate_limit_slip,
    format!("{DNS}[dns.rate_limit]\nslip = 11"),
    "dns.rate_limit.slip"
);
rule!(
    rate_limit_prefix,
    format!("{DNS}[dns.rate_limit]\nipv4_prefix = 33"),
    "dns.rate_limit.ipv4_prefix"
);
rule!(
    rate_limit_exempt,
    format!("{DNS}[dns.rate_limit]\nexempt = [\"x\"]"),
    "dns.rate_limit.exempt[0]"
);
rule!(
    tcp_clients,
    format!("{DNS}[dns.tcp]\nmax_clients = 0"),
    "dns.tcp.max_clients"
);
rule!(
    tcp_per_prefix_over_total,
    format!("{DNS}[dns.tcp]\nmax_clients = 10\nmax_clients_per_prefix = 11"),
    "dns.tcp.max_clients_per_prefix"
);
rule!(
    tcp_idle,
    format!("{DNS}[dns.tcp]\nidle_timeout = \"3600s\""),
    "dns.tcp.idle_timeout"
);

#[test]
fn limits_are_read() {
    let text = format!(
        "{DNS}[dns.rate_limit]\nresponses_per_second = 0\nslip = 1\nipv6_prefix = 48\nexempt = [\"198.18.9.7/24\"]\n\
         [dns.tcp]\nmax_clients = 100\nmax_clients_per_prefix = 4\nidle_timeout = \"2s\"\nmax_lifetime = \"30s\"\n{}",
        cfg("tm", "", "", "")
    );
    let dns = ok(&text).dns.unwrap();
    assert_eq!(dns.rate_limit.responses_per_second, 0, "off");
    assert_eq!(
        (
            dns.rate_limit.slip,
            dns.rate_limit.ipv4_prefix,
            dns.rate_limit.ipv6_prefix
        ),
        (1, 24, 48)
    );
    assert_eq!(
        dns.rate_limit.exempt,
        ["198.18.9.0/24".parse::<ipnet::IpNet>().unwrap()]
    );
    assert_eq!(
        dns.tcp,
        DnsTcp {
            max_clients: 100,
            max_clients_per_prefix: 4,
            idle_timeout: std::time::Duration::from_secs(2),
            max_lifetime: std::time::Duration::from_secs(30),
        }
    );
}
rule!(
    region_world,
    format!("{DNS}[[dns.region]]\nname = \"world\"\nsubnets = [\"10.0.0.0/8\"]"),
    "dns.region[0].name"
);
rule!(
    region_subnet_twice,
    format!(
        "{DNS}[[dns.region]]\nname = \"eu\"\nsubnets = [\"10.0.0.0/8\"]\n\
         [[dns.region]]\nname = \"us\"\nsubnets = [\"10.0.0.0/8\"]"
    ),
    "dns.region[1].subnets[0]"
);
rule!(
    dns_name_absolute,
    format!("{DNS}\n{}", cfg("tm", "dns_name = \"www.\"", "", "")),
    "profile[0].dns_name"
);
rule!(
    dns_ttl_garbage,
    format!("{DNS}\n{}", cfg("tm", "dns_ttl = \"30\"", "", "")),
    "profile[0].dns_ttl"
);

#[test]
fn two_profiles_may_not_answer_to_one_name() {
    let two = format!(
        "{DNS}\n{}\n{}",
        cfg("tm", "", "", ""),
        cfg("tm", "dns_name = \"WEB\"", "", "").replace("name = \"web\"", "name = \"other\"")
    );
    expect_error(&two, "profile[1].dns_name");
    // A profile name that is no DNS name needs a dns_name, but only where there is a [dns].
    let odd = cfg("tm", "", "", "").replace("name = \"web\"", "name = \"web_1\"");
    ok(&odd);
    expect_error(&format!("{DNS}\n{odd}"), "profile[0].dns_name");
}

#[test]
fn regions_by_country_and_continent_need_the_geoip_database() {
    let region = "[[dns.region]]\nname = \"eu\"\ncountries = [\"DE\"]\ncontinents = [\"EU\"]\n";
    let only_countries = "[[dns.region]]\nname = \"eu\"\ncountries = [\"DE\"]\n";
    expect_error(&format!("{DNS}{only_countries}"), "dns.region[0].countries");
    let c = ok(&format!("{DNS}geoip_db = \"/var/lib/GeoLite2-Country.mmdb\"\n{region}"));
    let dns = c.dns.unwrap();
    assert_eq!(dns.regions[0].countries, ["DE"]);
    assert!(dns.regions[0].subnets.is_empty(), "a region may be countries alone");
}

rule!(
    geoip_db_relative,
    format!("{DNS}geoip_db = \"GeoLite2.mmdb\""),
    "dns.geoip_db"
);
rule!(
    country_lower_case,
    format!("{DNS}geoip_db = \"/g.mmdb\"\n[[dns.region]]\nname = \"eu\"\ncountries = [\"de\"]"),
    "dns.region[0].countries[0]"
);
rule!(
    continent_unknown,
    format!("{DNS}geoip_db = \"/g.mmdb\"\n[[dns.region]]\nname = \"eu\"\ncontinents = [\"EUR\"]"),
    "dns.region[0].continents[0]"
);
rule!(
    country_in_two_regions,
    format!(
        "{DNS}geoip_db = \"/g.mmdb\"\n[[dns.region]]\nname = \"eu\"\ncountries = [\"DE\"]\n\
         [[dns.region]]\nname = \"de\"\ncountries = [\"DE\"]"
    ),
    "dns.region[1].countries"
);

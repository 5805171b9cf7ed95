//! `[daemon]` tests.
use super::*;

rule!(
    api_listen_garbage,
    "[daemon]\napi_listen = \"localhost\"",
    "daemon.api_listen"
);
rule!(
    api_listen_remote_refused,
    "[daemon]\napi_listen = \"0.0.0.0:9180\"",
    "daemon.api_listen"
);
rule!(
    api_unix_relative,
    "[daemon]\napi_listen = \"unix:probed.sock\"",
    "daemon.api_listen"
);
rule!(pin_dir_relative, "[daemon]\npin_dir = \"bpf/probed\"", "daemon.pin_dir");
rule!(events_empty, "[daemon]\nevents = \"\"", "daemon.events");

rule!(
    api_socket_group_garbage,
    "[daemon]\napi_socket_group = \"-wheel\"",
    "daemon.api_socket_group"
);
rule!(
    api_socket_group_over_tcp,
    "[daemon]\napi_listen = \"127.0.0.1:9180\"\napi_socket_group = \"adm\"",
    "daemon.api_socket_group"
);
rule!(
    api_socket_mode_too_wide,
    "[daemon]\napi_socket_mode = 0o1777",
    "daemon.api_socket_mode"
);
rule!(
    api_socket_mode_owner_cannot_write,
    "[daemon]\napi_socket_mode = 0o460",
    "daemon.api_socket_mode"
);
rule!(
    api_socket_mode_negative,
    "[daemon]\napi_socket_mode = -1",
    "daemon.api_socket_mode"
);
rule!(
    api_token_file_relative,
    "[daemon]\napi_listen = \"127.0.0.1:9180\"\napi_token_file = \"api.token\"",
    "daemon.api_token_file"
);
rule!(
    api_token_file_on_the_socket,
    "[daemon]\napi_token_file = \"/etc/probed/api.token\"",
    "daemon.api_token_file"
);

#[test]
fn remote_api_allowed_when_asked() {
    let c = ok("[daemon]\napi_listen = \"0.0.0.0:9180\"\napi_allow_remote = true\n");
    assert_eq!(c.daemon.api.listen, ApiListen::Tcp("0.0.0.0:9180".parse().unwrap()));
    let c = ok("[daemon]\napi_listen = \"unix:/run/probed.sock\"\nevents = \"/var/log/probed.jsonl\"\n");
    assert_eq!(c.daemon.api.listen, ApiListen::Unix("/run/probed.sock".into()));
}

#[test]
fn api_access_keys() {
    let c = ok("[daemon]\napi_socket_group = \"lbadmin\"\napi_socket_mode = 0o600\n");
    assert_eq!(c.daemon.api.socket_group, ApiGroup::Name("lbadmin".into()));
    assert_eq!(c.daemon.api.socket_mode, 0o600);
    let c = ok("[daemon]\napi_socket_group = \"4242\"\n");
    assert_eq!(c.daemon.api.socket_group, ApiGroup::Gid(4242));
    let c = ok("[daemon]\napi_listen = \"127.0.0.1:9180\"\napi_token_file = \"/etc/probed/api.token\"\n");
    assert_eq!(c.daemon.api.token_file, Some("/etc/probed/api.token".into()));
    let errs = refused("[daemon]\napi_socket_mode = 0o1777");
    assert!(
        errs.to_string().contains("0o1777 is not an allowed socket mode"),
        "{errs}"
    );
}

#[test]
fn a_reload_names_each_changed_api_key() {
    let old = ok("");
    let new = ok("[daemon]\napi_socket_group = \"adm\"\napi_socket_mode = 0o600\n");
    let keys: Vec<_> = old.daemon.api.changed_keys(&new.daemon.api).collect();
    assert_eq!(keys, ["api_socket_group", "api_socket_mode"]);
    assert_eq!(old.daemon.api.changed_keys(&old.daemon.api).count(), 0);
    let tcp = ok("[daemon]\napi_listen = \"127.0.0.1:9180\"\napi_token_file = \"/etc/probed/t\"\n");
    let keys: Vec<_> = old.daemon.api.changed_keys(&tcp.daemon.api).collect();
    assert_eq!(keys, ["api_listen", "api_token_file"]);
}

rule!(l7_workers_zero, "[daemon]\nl7_workers = 0", "daemon.l7_workers");
rule!(l7_workers_too_many, "[daemon]\nl7_workers = 257", "daemon.l7_workers");
rule!(
    l7_workers_not_a_number,
    "[daemon]\nl7_workers = \"all\"",
    "daemon.l7_workers"
);

#[test]
fn l7_workers_default_to_one_per_core() {
    assert_eq!(ok("").daemon.l7_workers, None);
    assert_eq!(ok("[daemon]\nl7_workers = 4").daemon.l7_workers, Some(4));
}

rule!(
    http_probes_unknown,
    "[daemon]\nhttp_probes = \"ebpf\"",
    "daemon.http_probes"
);

#[test]
fn http_probes_default_to_the_kernel() {
    use crate::config::model::HttpProbes;
    assert_eq!(ok("").daemon.http_probes, HttpProbes::Kernel);
    assert_eq!(
        ok("[daemon]\nhttp_probes = \"sockets\"").daemon.http_probes,
        HttpProbes::Sockets
    );
}

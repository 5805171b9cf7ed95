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

#[test]
fn remote_api_allowed_when_asked() {
    let c = ok("[daemon]\napi_listen = \"0.0.0.0:9180\"\napi_allow_remote = true\n");
    assert_eq!(c.daemon.api, ApiListen::Tcp("0.0.0.0:9180".parse().unwrap()));
    let c = ok("[daemon]\napi_listen = \"unix:/run/probed.sock\"\nevents = \"/var/log/probed.jsonl\"\n");
    assert_eq!(c.daemon.api, ApiListen::Unix("/run/probed.sock".into()));
}

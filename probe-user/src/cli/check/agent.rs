//! `probed check agent://HOST:PORT`: asks the agent there once per probe, as the daemon does
//! every `agent_interval`, and prints what it answered.
use std::{process::ExitCode, time::Duration};

use probed::probe::agent::AgentProbe;

use super::{l4::resolve, render::Line, CheckArgs};

pub(super) fn check_agent(args: &CheckArgs, host: &str, port: u16) -> anyhow::Result<ExitCode> {
    let target = resolve(host, port)?;
    let probe = AgentProbe {
        port,
        send: std::sync::Arc::from(args.send.as_bytes()),
        timeout: Duration::from_millis(args.timeout),
        interval: Duration::from_millis(args.interval),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut all_healthy = true;
    for i in 0..args.count {
        if i > 0 {
            std::thread::sleep(probe.interval);
        }
        let asked = rt.block_on(probe.ask(target));
        let line = Line::agent(&args.url, target, &asked);
        all_healthy &= line.healthy;
        println!("{}", line.render(args.json));
    }
    Ok(super::exit_code(all_healthy))
}

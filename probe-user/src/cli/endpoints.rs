//! `probed endpoints list|add|set|remove|batch PROFILE ...`: the fleet API from a shell.
#[allow(clippy::wildcard_imports)]
use super::*;

/// What `probed endpoints` does.
#[derive(Subcommand)]
pub(super) enum EndpointsCommand {
    /// The profile's endpoints as the fleet API takes them, and its generation.
    List {
        profile: String,
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Add an endpoint, or put it in place of the one of its name: KEY=VALUE for each key of
    /// [[profile.endpoint]] it sets (address=198.18.0.7 port=8080 weight=3).
    Add {
        profile: String,
        #[arg(required = true, value_name = "KEY=VALUE")]
        keys: Vec<String>,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Change some keys of an endpoint, the others kept (weight=5 state=disabled).
    Set {
        profile: String,
        endpoint: String,
        #[arg(required = true, value_name = "KEY=VALUE")]
        keys: Vec<String>,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Remove endpoints by name (a name the profile does not have is already removed).
    Remove {
        profile: String,
        #[arg(required = true)]
        endpoints: Vec<String>,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Apply a batch from a JSON file ("-": standard input): {"put": [...], "set": [...],
    /// "remove": [...], "generation": N}.
    Batch {
        profile: String,
        file: PathBuf,
        #[command(flatten)]
        api: ApiArgs,
    },
}

/// What every change takes.
#[derive(clap::Args)]
pub(super) struct ChangeArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Apply only while the profile is at this generation (`probed endpoints list` shows it).
    #[arg(long)]
    generation: Option<u64>,
}

pub(super) fn endpoints(command: EndpointsCommand) -> anyhow::Result<ExitCode> {
    let (profile, api, batch) = match command {
        EndpointsCommand::List { profile, api, json } => return list(&profile, &api, json),
        EndpointsCommand::Add { profile, keys, change } => {
            let batch = serde_json::json!({ "put": [item(&keys)?], "generation": change.generation });
            (profile, change.api, batch)
        }
        EndpointsCommand::Set {
            profile,
            endpoint,
            keys,
            change,
        } => {
            let mut item = item(&keys)?;
            item.insert("name".into(), serde_json::Value::String(endpoint));
            (
                profile,
                change.api,
                serde_json::json!({ "set": [item], "generation": change.generation }),
            )
        }
        EndpointsCommand::Remove {
            profile,
            endpoints,
            change,
        } => (
            profile,
            change.api,
            serde_json::json!({ "remove": endpoints, "generation": change.generation }),
        ),
        EndpointsCommand::Batch { profile, file, api } => {
            let text = if file.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file).map_err(|e| anyhow::anyhow!("read {}: {e}", file.display()))?
            };
            let batch: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is not JSON: {e}", file.display()))?;
            (profile, api, batch)
        }
    };
    let mut batch = batch;
    if let Some(m) = batch.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    let path = format!("/v1/profiles/{}/endpoints", percent_encode(&profile));
    let body = serde_json::to_vec(&batch)?;
    let resp = api_client(&api)?
        .request_with("POST", &path, &body)
        .map_err(|e| api_failure(e, &api.api))?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    let applied: probed::fleet::Applied = serde_json::from_str(&resp.body)?;
    println!(
        "{}: {} added, {} changed, {} removed, {} unchanged; {} endpoints, generation {}",
        applied.profile,
        applied.added,
        applied.changed,
        applied.removed,
        applied.unchanged,
        applied.endpoints,
        applied.generation
    );
    Ok(ExitCode::SUCCESS)
}

/// KEY=VALUE arguments as an endpoint item: a value that reads as JSON (a number, true,
/// ["a", "b"]) is taken as such, any other as a string.
fn item(keys: &[String]) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let mut m = serde_json::Map::new();
    for kv in keys {
        let Some((k, v)) = kv.split_once('=') else {
            anyhow::bail!("{kv:?}: expected KEY=VALUE, e.g. address=198.18.0.7");
        };
        let value = match serde_json::from_str::<serde_json::Value>(v) {
            Ok(j) if !j.is_string() && !j.is_null() => j,
            _ => serde_json::Value::String(v.to_string()),
        };
        m.insert(k.to_string(), value);
    }
    Ok(m)
}

fn list(profile: &str, api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let resp = api_get(
        api,
        "GET",
        &format!("/v1/profiles/{}/endpoints", percent_encode(profile)),
    )?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    if json {
        println!("{}", resp.body.trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    let view: probed::fleet::FleetView = serde_json::from_str(&resp.body)?;
    println!(
        "{}: {} endpoints from {}, generation {}",
        view.profile, view.total, view.endpoints_from, view.generation
    );
    for e in &view.endpoints {
        let get = |k: &str| {
            e.get(k).map_or_else(String::new, |v| {
                v.as_str().map_or_else(|| v.to_string(), str::to_string)
            })
        };
        println!(
            "  {:<28} {:<40} weight {:<4} priority {:<4} {}",
            get("name"),
            format!("{}:{}", get("address"), get("port")),
            get("weight"),
            get("priority"),
            get("state")
        );
    }
    Ok(ExitCode::SUCCESS)
}

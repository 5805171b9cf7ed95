//! `probed generate man|completions DIR`: the manual pages (section 8: `probed(8)` and one per
//! subcommand, made from the clap definitions; section 5: `probed.toml(5)`, made from the
//! configuration reference the config reader takes its keys from) and the bash, zsh and fish
//! completions, so that none of them drifts from the binary. Packages run it at build time; it is
//! hidden from `--help`.
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Writes `probed.8`, `probed-SUBCOMMAND.8` for every visible subcommand and `probed.toml.5`
/// into `dir`.
pub fn man(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    page(cmd, dir, &mut written)?;
    let config = dir.join(CONFIG_PAGE);
    std::fs::write(&config, probed::config::reference::man_page())?;
    written.push(config);
    Ok(written)
}

/// The configuration file's page, section 5.
const CONFIG_PAGE: &str = "probed.toml.5";

fn page(cmd: clap::Command, dir: &Path, written: &mut Vec<std::path::PathBuf>) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
        page(sub, dir, written)?;
    }
    written.push(clap_mangen::Man::new(cmd).section("8").generate_to(dir)?);
    Ok(())
}

/// Writes `probed.bash`, `_probed` (zsh) and `probed.fish` into `dir`.
pub fn completions(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        written.push(clap_complete::generate_to(shell, &mut Cli::command(), "probed", dir)?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_cover_every_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("probed-generate-{}", std::process::id()));
        let pages = man(&dir.join("man")).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "probed.8",
            "probed-run.8",
            "probed-status.8",
            "probed-disable.8",
            "probed-check.8",
            "probed.toml.5",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.contains("generate")),
            "the hidden command has no page"
        );
        let run = std::fs::read_to_string(dir.join("man/probed-run.8")).unwrap();
        assert!(
            run.starts_with(".ie") || run.contains(".TH"),
            "roff: {}",
            &run[..80.min(run.len())]
        );
        assert!(run.contains("SIGHUP"), "the subcommand's long help is in its page");
        config_page_lists_every_key(&std::fs::read_to_string(dir.join("man/probed.toml.5")).unwrap());
        let files = completions(&dir.join("completions")).unwrap();
        assert_eq!(files.len(), 3);
        let bash = std::fs::read_to_string(dir.join("completions/probed.bash")).unwrap();
        assert!(
            bash.contains("always-serve") && bash.contains("--log-format"),
            "{}",
            bash.len()
        );
        assert!(dir.join("completions/_probed").exists() && dir.join("completions/probed.fish").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// probed.toml(5) is a section 5 page that names every table and every key the config reader
    /// accepts (its lists are the reference's, `config::reference`).
    fn config_page_lists_every_key(page: &str) {
        use probed::config::reference::{ROOT, SECTIONS};
        assert!(
            page.contains("\n.TH probed.toml 5 "),
            "{}",
            &page[..200.min(page.len())]
        );
        // Roff escapes '-' as "\-" (none of the names has one today).
        let roff = |s: &str| s.replace('-', "\\-");
        let mut keys = 0;
        for key in ROOT.keys() {
            let section = SECTIONS
                .iter()
                .find(|s| s.path == key.name)
                .expect("a section per table");
            assert!(
                page.contains(&format!("\\fB{}\\fR", section.header)),
                "no {}",
                section.header
            );
        }
        for section in SECTIONS {
            assert!(
                page.contains(&format!("\n.SS {}\n", section.header)),
                "no {}",
                section.header
            );
            let at = page.find(&format!("\n.SS {}\n", section.header)).unwrap();
            let rest = &page[at + 1..];
            let body = &rest[..rest[1..].find("\n.S").map_or(rest.len(), |i| i + 1)];
            for key in section.keys() {
                let tag = format!("\n.TP\n\\fB{}\\fR (\\fI{}\\fR)\n", roff(key.name), key.ty.name());
                assert!(
                    body.contains(&tag),
                    "{} has no entry for {} ({tag:?})",
                    section.header,
                    key.name
                );
                keys += 1;
            }
        }
        assert!(keys > 100, "{keys} keys");
    }
}

//! `probed generate man|completions DIR`: the manual pages (section 8: `probed(8)` and one per
//! subcommand) and the bash, zsh and fish completions, made from the clap definitions so that
//! they never drift from the binary. Packages run it at build time; it is hidden from `--help`.
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// Writes `probed.8` and `probed-SUBCOMMAND.8` for every visible subcommand into `dir`.
pub fn man(dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    page(cmd, dir, &mut written)?;
    Ok(written)
}

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
}

//! `cargo xtask deb`: the Debian package, `target/debian/probed_VERSION_ARCH.deb`, from the
//! release build: a staging tree laid out here, control files written from dist/debian/, then
//! `dpkg-deb --build --root-owner-group`.
//!
//! Built here rather than with cargo-deb: the package is a few dozen files, the maintainer
//! scripts and the copyright file are ours either way, and `cargo install cargo-deb` would add
//! minutes and a registry download to every fresh CI machine for what dpkg-dev already does.
use std::{
    collections::BTreeSet,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context};

use crate::util::{cargo, output, render, root, sh, target_dir};

/// The package's name, and the name of its unit, user and directories.
const PACKAGE: &str = "probed";
/// The one conffile (dpkg keeps the operator's edits on upgrade, asks when both changed).
const CONFFILE: &str = "etc/probed/probed.toml";

/// Files copied from the workspace as they are: (source, path in the package, mode).
const COPIED: &[(&str, &str, u32)] = &[
    ("dist/probed.service", "lib/systemd/system/probed.service", 0o644),
    ("dist/probed.toml", CONFFILE, 0o644),
    (
        "dist/backend-nftables.nft",
        "usr/share/doc/probed/examples/backend-nftables.nft",
        0o644,
    ),
    // Why the tags lintian raises that do not apply are left.
    (
        "dist/debian/lintian-overrides",
        "usr/share/lintian/overrides/probed",
        0o644,
    ),
    // Every kind of profile, commented: what the shipped conffile points to.
    (
        "probe-user/examples/probed.toml",
        "usr/share/doc/probed/examples/probed.toml",
        0o644,
    ),
];

/// Documentation compressed with `gzip -9n`, as Debian policy (12.3) asks of files over 4 KiB.
const DOCS: &[(&str, &str)] = &[
    ("README.md", "usr/share/doc/probed/README.md.gz"),
    (
        "docs/operations/README.md",
        "usr/share/doc/probed/operations/README.md.gz",
    ),
    ("docs/operations/api.md", "usr/share/doc/probed/operations/api.md.gz"),
    (
        "docs/operations/backends.md",
        "usr/share/doc/probed/operations/backends.md.gz",
    ),
    (
        "docs/operations/cluster.md",
        "usr/share/doc/probed/operations/cluster.md.gz",
    ),
    (
        "docs/operations/configuration.md",
        "usr/share/doc/probed/operations/configuration.md.gz",
    ),
    ("docs/operations/dns.md", "usr/share/doc/probed/operations/dns.md.gz"),
    (
        "docs/operations/events.md",
        "usr/share/doc/probed/operations/events.md.gz",
    ),
    (
        "docs/operations/install.md",
        "usr/share/doc/probed/operations/install.md.gz",
    ),
    (
        "docs/operations/metrics.md",
        "usr/share/doc/probed/operations/metrics.md.gz",
    ),
    ("docs/operations/node.md", "usr/share/doc/probed/operations/node.md.gz"),
    (
        "docs/operations/running.md",
        "usr/share/doc/probed/operations/running.md.gz",
    ),
    (
        "docs/operations/security.md",
        "usr/share/doc/probed/operations/security.md.gz",
    ),
    (
        "docs/operations/sinks.md",
        "usr/share/doc/probed/operations/sinks.md.gz",
    ),
    (
        "docs/operations/sizing.md",
        "usr/share/doc/probed/operations/sizing.md.gz",
    ),
    ("docs/spec.md", "usr/share/doc/probed/spec.md.gz"),
    ("docs/design/udp.md", "usr/share/doc/probed/udp.md.gz"),
];

/// What `probed generate completions` writes, and where each shell looks for it.
const COMPLETIONS: &[(&str, &str)] = &[
    ("probed.bash", "usr/share/bash-completion/completions/probed"),
    ("_probed", "usr/share/zsh/vendor-completions/_probed"),
    ("probed.fish", "usr/share/fish/vendor_completions.d/probed.fish"),
];

const MAINTAINER_SCRIPTS: &[&str] = &["postinst", "prerm", "postrm"];

/// Dependencies the binary's ELF header does not show: the maintainer scripts call adduser,
/// the unit's ExecReload calls /bin/kill (procps).
const SCRIPT_DEPENDS: &[&str] = &["adduser", "procps"];

/// Sets up (as every verb that builds does), builds the package and prints its path.
pub fn run() -> anyhow::Result<()> {
    crate::setup::run()?;
    let deb = build()?;
    println!("{}", deb.display());
    Ok(())
}

/// Builds the release binary, then the package; returns the .deb's path.
pub fn build() -> anyhow::Result<PathBuf> {
    sh(cargo().args(["build", "--release", "-p", "probe-user"]))?;
    let root = root();
    let changelog = root.join("dist/debian/changelog");
    let version = changelog_field(&changelog, "Version")?;
    check_upstream_version(&version, &cargo_version(&root.join("probe-user/Cargo.toml"))?)?;
    let arch = output(Command::new("dpkg").arg("--print-architecture"))
        .context("dpkg --print-architecture failed: is this a Debian machine?")?
        .trim()
        .to_string();
    let out_dir = target_dir().join("debian");
    let name = format!("{PACKAGE}_{version}_{arch}");
    let stage = out_dir.join(&name);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("remove the old staging tree {}", stage.display()))?;
    }
    fs::create_dir_all(&stage).with_context(|| format!("create {}", stage.display()))?;

    let binary = target_dir().join("release/probed");
    stage_binary(&binary, &stage)?;
    for (from, to, mode) in COPIED {
        copy(&root.join(from), &stage.join(to), *mode)?;
    }
    for (from, to) in DOCS {
        gzip(&root.join(from), &stage.join(to))?;
    }
    gzip(&changelog, &stage.join("usr/share/doc/probed/changelog.Debian.gz"))?;
    write(
        &stage.join("usr/share/doc/probed/copyright"),
        &copyright(&root.join("dist/debian/copyright"))?,
        0o644,
    )?;
    stage_generated(&binary, &out_dir, &stage)?;

    // Directories 0755, whatever the umask made them; dpkg-deb records these modes.
    set_dir_modes(&stage)?;
    let control_dir = stage.join("DEBIAN");
    fs::create_dir_all(&control_dir).context("create DEBIAN/")?;
    fs::set_permissions(&control_dir, fs::Permissions::from_mode(0o755)).context("chmod DEBIAN/")?;
    for script in MAINTAINER_SCRIPTS {
        copy(&root.join("dist/debian").join(script), &control_dir.join(script), 0o755)?;
    }
    write(&control_dir.join("conffiles"), &format!("/{CONFFILE}\n"), 0o644)?;
    write(&control_dir.join("md5sums"), &md5sums(&stage)?, 0o644)?;
    let control = control(
        &version,
        &arch,
        &depends(&stage.join("usr/bin/probed"), &out_dir)?,
        &stage,
    )?;
    write(&control_dir.join("control"), &control, 0o644)?;

    // Every file and directory dated at the changelog's entry, so that the same sources give
    // the same package, byte for byte (with SOURCE_DATE_EPOCH for dpkg-deb's own dates).
    let epoch = changelog_field(&changelog, "Timestamp")?;
    sh(Command::new("find").arg(&stage).args([
        "-exec",
        "touch",
        "--no-dereference",
        &format!("--date=@{epoch}"),
        "{}",
        "+",
    ]))?;
    let deb = out_dir.join(format!("{name}.deb"));
    sh(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&stage)
        .arg(&deb)
        .env("SOURCE_DATE_EPOCH", epoch)
        .stdout(std::io::stderr()))
    .context("dpkg-deb could not build the package (dpkg-dev installs it; `cargo xtask setup`)")?;
    Ok(deb)
}

/// A field of the top entry of a Debian changelog (`dpkg-parsechangelog -S`).
fn changelog_field(changelog: &Path, field: &str) -> anyhow::Result<String> {
    let value = output(
        Command::new("dpkg-parsechangelog")
            .arg("-l")
            .arg(changelog)
            .args(["-S", field]),
    )
    .with_context(|| {
        format!(
            "dpkg-parsechangelog cannot read {} (is dpkg-dev installed, is the entry well formed?)",
            changelog.display()
        )
    })?;
    Ok(value.trim().to_string())
}

/// `version = "..."` of a manifest's [package] table.
fn cargo_version(manifest: &Path) -> anyhow::Result<String> {
    let text = fs::read_to_string(manifest).with_context(|| format!("read {}", manifest.display()))?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if let Some(value) = line.strip_prefix("version").map(str::trim_start) {
            if in_package {
                if let Some(v) = value.strip_prefix('=').map(|v| v.trim().trim_matches('"')) {
                    return Ok(v.to_string());
                }
            }
        }
    }
    bail!("{} has no version in [package]", manifest.display())
}

/// The Debian version is the changelog's; its upstream part must be the crate's version, so a
/// release cannot ship under the previous version by mistake.
fn check_upstream_version(debian: &str, crate_version: &str) -> anyhow::Result<()> {
    let upstream = debian.rsplit_once('-').map_or(debian, |(u, _)| u);
    let upstream = upstream.split_once(':').map_or(upstream, |(_, u)| u);
    ensure!(
        upstream == crate_version,
        "dist/debian/changelog's top entry is {debian}, but probe-user is version {crate_version}: \
         add an entry for {crate_version}-1 (dch -c dist/debian/changelog -v {crate_version}-1)"
    );
    Ok(())
}

/// /usr/bin/probed without debug information, symbol tables or the toolchain's notes.
fn stage_binary(binary: &Path, stage: &Path) -> anyhow::Result<()> {
    let to = stage.join("usr/bin/probed");
    fs::create_dir_all(to.parent().unwrap()).context("create usr/bin")?;
    sh(Command::new("strip")
        .args([
            "--strip-unneeded",
            "--remove-section=.comment",
            "--remove-section=.note",
        ])
        .arg("-o")
        .arg(&to)
        .arg(binary))
    .with_context(|| format!("strip {} (binutils)", binary.display()))?;
    fs::set_permissions(&to, fs::Permissions::from_mode(0o755)).context("chmod usr/bin/probed")
}

/// The configuration file's manual page, `probed.toml(5)`, that `probed generate man` writes.
const CONFIG_PAGE: &str = "probed.toml.5";

/// Manual pages and completions, as the binary generates them from its clap definitions and its
/// configuration reference.
fn stage_generated(binary: &Path, out_dir: &Path, stage: &Path) -> anyhow::Result<()> {
    let generated = out_dir.join("generated");
    if generated.exists() {
        fs::remove_dir_all(&generated).with_context(|| format!("remove {}", generated.display()))?;
    }
    let man_dir = generated.join("man");
    // Their listings go to stderr: the .deb's path is the one line `xtask deb` prints on stdout.
    sh(Command::new(binary)
        .args(["generate", "man"])
        .arg(&man_dir)
        .stdout(std::io::stderr()))?;
    // Each page goes to the directory of its section, the file name's extension: the commands'
    // pages to man8, probed.toml.5 (the configuration file) to man5.
    let (mut commands, mut config) = (0, false);
    for entry in fs::read_dir(&man_dir).with_context(|| format!("read {}", man_dir.display()))? {
        let page = entry?.path();
        let file = page.file_name().unwrap().to_string_lossy().into_owned();
        let section = Path::new(&file)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        ensure!(
            section == "8" || file == CONFIG_PAGE,
            "probed generate man wrote {file}, expected section 8 pages and {CONFIG_PAGE} only"
        );
        gzip(
            &page,
            &stage
                .join(format!("usr/share/man/man{section}"))
                .join(format!("{file}.gz")),
        )?;
        commands += usize::from(section == "8");
        config |= file == CONFIG_PAGE;
    }
    ensure!(
        commands > 1 && config,
        "probed generate man wrote {commands} section 8 pages{}, expected probed.8, one per subcommand \
         and {CONFIG_PAGE}",
        if config { "" } else { " and no configuration page" }
    );
    let completions = generated.join("completions");
    sh(Command::new(binary)
        .args(["generate", "completions"])
        .arg(&completions)
        .stdout(std::io::stderr()))?;
    for (from, to) in COMPLETIONS {
        copy(&completions.join(from), &stage.join(to), 0o644)?;
    }
    Ok(())
}

/// The copyright file, with the crates the binary links in listed where the template says.
fn copyright(template: &Path) -> anyhow::Result<String> {
    let text = fs::read_to_string(template).with_context(|| format!("read {}", template.display()))?;
    // Normal edges only (what is linked in), proc-macros left out (they run in the compiler).
    let tree = output(cargo().args([
        "tree",
        "-p",
        "probe-user",
        "-e",
        "normal,no-proc-macro",
        "--prefix",
        "none",
        "--format",
        "{p}|{l}",
    ]))
    .context("cargo tree failed: it lists the crates for the copyright file")?;
    let mut crates = BTreeSet::new();
    for line in tree.lines() {
        let (id, license) = line.split_once('|').context("cargo tree printed a line without '|'")?;
        let mut words = id.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            bail!("cargo tree printed {line:?}");
        };
        if name == "probe-user" || name == "probe-common" {
            continue;
        }
        let license = license.trim_end_matches(" (*)").trim();
        ensure!(!license.is_empty(), "the crate {name} {version} declares no license");
        crates.insert(format!(" {name} {}: {license}", version.trim_start_matches('v')));
    }
    ensure!(!crates.is_empty(), "cargo tree listed no crates");
    let list = crates.into_iter().collect::<Vec<_>>().join("\n");
    ensure!(text.contains("@CRATES@"), "{} has no @CRATES@ line", template.display());
    Ok(text.replace("@CRATES@", &list))
}

/// `Depends:` from the binary's shared libraries (dpkg-shlibdeps reads the libraries' symbol
/// files for the lowest versions that have every symbol used) and what the scripts call.
fn depends(binary: &Path, out_dir: &Path) -> anyhow::Result<String> {
    // dpkg-shlibdeps wants to run in a source tree: a debian/control with the one package.
    let tree = out_dir.join("shlibdeps");
    fs::create_dir_all(tree.join("debian")).context("create the dpkg-shlibdeps tree")?;
    fs::write(
        tree.join("debian/control"),
        format!("Source: {PACKAGE}\n\nPackage: {PACKAGE}\nArchitecture: any\n"),
    )
    .context("write the dpkg-shlibdeps control file")?;
    let mut cmd = Command::new("dpkg-shlibdeps");
    cmd.arg("-O").arg(format!("-e{}", binary.display())).current_dir(&tree);
    let out = output(&mut cmd).with_context(|| format!("{} failed", render(&cmd)))?;
    let shlibs = out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .with_context(|| format!("dpkg-shlibdeps printed no shlibs:Depends: {out}"))?;
    let mut all: Vec<String> = SCRIPT_DEPENDS.iter().map(ToString::to_string).collect();
    all.extend(shlibs.split(',').map(|d| d.trim().to_string()));
    Ok(all.join(", "))
}

/// DEBIAN/control.
fn control(version: &str, arch: &str, depends: &str, stage: &Path) -> anyhow::Result<String> {
    let maintainer = changelog_field(&root().join("dist/debian/changelog"), "Maintainer")?;
    Ok(format!(
        "Package: {PACKAGE}
Version: {version}
Architecture: {arch}
Maintainer: {maintainer}
Installed-Size: {size}
Depends: {depends}
Recommends: libnftables1
Suggests: nftables
Section: net
Priority: optional
Description: kernel-accelerated health checks for load-balancer backends
 probed checks the backends of a load-balancer node and keeps the node's
 forwarding in step with their health. XDP programs send the TCP and UDP
 probes and match the replies in the kernel; HTTP and HTTPS checks, health
 thresholds, routing (priority, weighted, subnet, geographic and more) and a
 local API run in the daemon. It can write the eligible backends into
 nftables sets and maps, pinned BPF slot tables or HAProxy, and answer DNS
 for them.
 .
 The package runs the daemon as a systemd service under its own user with
 four capabilities (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_NET_RAW).
 libnftables1 (recommended) is needed for the nftables sinks and for the
 conntrack exemption of probes.
",
        size = installed_size(stage)?,
    ))
}

/// Installed-Size in KiB: each file rounded up to a KiB, each directory one.
fn installed_size(dir: &Path) -> anyhow::Result<u64> {
    let mut kib = 0;
    for entry in fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name() == "DEBIAN" {
            continue;
        }
        let meta = entry.metadata()?;
        kib += if meta.is_dir() {
            1 + installed_size(&entry.path())?
        } else {
            meta.len().div_ceil(1024)
        };
    }
    Ok(kib)
}

/// DEBIAN/md5sums: every file but the conffile (dpkg records conffiles' sums itself).
fn md5sums(stage: &Path) -> anyhow::Result<String> {
    let mut files = Vec::new();
    list_files(stage, stage, &mut files)?;
    files.retain(|f| f != CONFFILE && !f.starts_with("DEBIAN/"));
    files.sort();
    let mut cmd = Command::new("md5sum");
    cmd.arg("--").args(&files).current_dir(stage);
    output(&mut cmd).context("md5sum failed on the staging tree")
}

fn list_files(base: &Path, dir: &Path, out: &mut Vec<String>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            list_files(base, &path, out)?;
        } else {
            out.push(path.strip_prefix(base).unwrap().to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn set_dir_modes(dir: &Path) -> anyhow::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).with_context(|| format!("chmod {}", dir.display()))?;
    for entry in fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            set_dir_modes(&path)?;
        }
    }
    Ok(())
}

fn copy(from: &Path, to: &Path, mode: u32) -> anyhow::Result<()> {
    fs::create_dir_all(to.parent().unwrap()).with_context(|| format!("create the directory of {}", to.display()))?;
    fs::copy(from, to).with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode)).with_context(|| format!("chmod {}", to.display()))
}

fn write(to: &Path, text: &str, mode: u32) -> anyhow::Result<()> {
    fs::create_dir_all(to.parent().unwrap()).with_context(|| format!("create the directory of {}", to.display()))?;
    fs::write(to, text).with_context(|| format!("write {}", to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode)).with_context(|| format!("chmod {}", to.display()))
}

/// `gzip -9n`: no name or time stamp in the header, so the bytes depend on the content only.
fn gzip(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to.parent().unwrap()).with_context(|| format!("create the directory of {}", to.display()))?;
    let out = fs::File::create(to).with_context(|| format!("create {}", to.display()))?;
    let mut cmd = Command::new("gzip");
    cmd.args(["-9n", "-c"]).arg(from).stdout(out);
    let status = cmd.status().with_context(|| format!("start {}", render(&cmd)))?;
    ensure!(status.success(), "{} failed ({status})", render(&cmd));
    fs::set_permissions(to, fs::Permissions::from_mode(0o644)).with_context(|| format!("chmod {}", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changelog_must_name_the_crate_version() {
        check_upstream_version("0.1.0-1", "0.1.0").unwrap();
        check_upstream_version("1:0.1.0-3", "0.1.0").unwrap();
        let err = check_upstream_version("0.1.0-1", "0.2.0").unwrap_err().to_string();
        assert!(err.contains("add an entry for 0.2.0-1"), "{err}");
    }

    #[test]
    fn cargo_version_reads_the_package_table() {
        let dir = std::env::temp_dir().join(format!("xtask-deb-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let manifest = dir.join("Cargo.toml");
        fs::write(
            &manifest,
            "[package]\nname = \"x\"\nversion = \"1.2.3\"\n\n[dependencies]\nversion = \"9\"\n",
        )
        .unwrap();
        assert_eq!(cargo_version(&manifest).unwrap(), "1.2.3");
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! `cargo xtask inspect`: what bpftool sees of probed's programs and pinned maps.
use std::process::Command;

use crate::util::{output, require_root};

pub fn run(pin_dir: &str) -> anyhow::Result<()> {
    require_root("inspect")?;
    let progs = output(Command::new("bpftool").args(["prog", "show"])).unwrap_or_default();
    println!("== loaded probe programs (bpftool prog show) ==");
    print_blocks(&progs, |head| head.contains(" name probe_"));
    let maps = output(Command::new("bpftool").args(["map", "show"])).unwrap_or_default();
    println!("== probe maps (bpftool map show) ==");
    print_blocks(&maps, |head| head.contains(" name PROBE_"));
    println!("== pinned under {pin_dir} ==");
    let Ok(entries) = std::fs::read_dir(pin_dir) else {
        println!("(nothing: no daemon has pinned maps there)");
        return Ok(());
    };
    for e in entries.flatten() {
        let path = e.path();
        println!("-- {}", path.display());
        let dump = output(Command::new("bpftool").args(["map", "dump", "pinned"]).arg(&path))
            .unwrap_or_else(|| "(bpftool could not dump it)".into());
        // Large maps are summarised: bpftool prints every entry.
        for line in dump.lines().take(40) {
            println!("{line}");
        }
    }
    Ok(())
}

/// bpftool prints one record as a head line plus indented lines; keep the matching records.
fn print_blocks(text: &str, keep: impl Fn(&str) -> bool) {
    let mut show = false;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.starts_with('\t') {
            show = keep(line);
        }
        if show {
            println!("{line}");
        }
    }
}

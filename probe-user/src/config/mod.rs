//! The TOML configuration: `Config::load` reads, checks and resolves a file in one go, and
//! reports every problem at once with its line, column, field, value and the allowed values.
mod model;
pub mod reference;
mod validate;

pub use crate::schema::error::{ConfigError, ConfigErrors};
pub(crate) use crate::schema::read;

pub(crate) use validate::endpoint::{api_endpoint, api_item, Taken};

use std::path::Path;

pub use model::*;
pub use read::parse_duration;

impl Config {
    /// Reads and checks `path`. Nothing of a bad file is returned.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigErrors> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                file: file.clone(),
                line: 0,
                column: 0,
                field: String::new(),
                profile: None,
                value: None,
                problem: format!("cannot read the file: {e}"),
            }])
        })?;
        Config::parse(&text, &file)
    }

    /// Checks `text`; `file_name` only labels the errors.
    pub fn parse(text: &str, file_name: &str) -> Result<Config, ConfigErrors> {
        validate::parse(text, file_name)
    }
}

#[cfg(test)]
mod tests;

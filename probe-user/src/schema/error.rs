//! A configuration's problems: each with its file, line, column, field and value, and all of
//! them at once.
use std::fmt;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the problem is not tied to a place (the file could not be read).
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// Full field path, e.g. `profile[0].health.interval`; empty for syntax and read errors.
    pub field: String,
    /// Name of the profile the field belongs to, when it has a readable one.
    pub profile: Option<String>,
    /// The offending value as written, when there is one.
    pub value: Option<String>,
    /// What is wrong, and what is allowed.
    pub problem: String,
}

impl ConfigError {
    /// A problem in an item of a fleet API batch: no file, no line.
    pub fn batch(field: String, value: Option<String>, problem: String) -> ConfigError {
        ConfigError {
            file: "batch".into(),
            line: 0,
            column: 0,
            field,
            profile: None,
            value,
            problem,
        }
    }

    fn render(&self) -> String {
        let mut out = if self.line == 0 {
            format!("{}: ", self.file)
        } else {
            format!("{}:{}:{}: ", self.file, self.line, self.column)
        };
        let field = match &self.profile {
            Some(name) => {
                out.push_str(&format!("profile {name:?} "));
                // `profile[3].health.port` reads as `health.port` once the profile is named.
                self.field
                    .split_once("].")
                    .map_or(self.field.as_str(), |(_, rest)| rest)
            }
            None => self.field.as_str(),
        };
        if !field.is_empty() {
            out.push_str(field);
            if let Some(value) = &self.value {
                out.push_str(&format!(" = {value}"));
            }
            out.push_str(": ");
        }
        out.push_str(&self.problem);
        out
    }
}

/// Every problem found in a configuration; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl ConfigErrors {
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

//! The machinery of the configuration file, below every part that has keys: how a table and
//! its keys are described (`keys`), how the spanned TOML tree is read with every problem kept
//! (`read`), and the problems themselves (`error`). `config` holds the file's sections and the
//! reference made of them; a probe or sink kind declares and reads its own keys with this.
pub mod error;
pub mod keys;
pub(crate) mod read;

//! Column rules: which table columns get ids from which generator.
//!
//! `spec` is the schema of one rule file. (The loader, with file:line errors and
//! whole-set validation, lives beside it.)

pub mod spec;

pub use spec::{GeneratorKind, GeneratorRule, RuleFile, TableRule, TimeUnit};

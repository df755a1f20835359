//! Errors of the rule loader: every problem found in a rules directory, each
//! with the file and line it comes from.

use std::fmt;
use std::path::PathBuf;

/// One problem in a rules directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in (or the directory, for problems reading it).
    pub file: PathBuf,
    /// 1-based line in `file`, when the problem has a place in it.
    pub line: Option<usize>,
    /// What is wrong, naming the generator, table or column involved.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.file.display(), line, self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

/// A rules directory that cannot be used. Carries *every* problem found (not
/// only the first), one per line in its `Display`, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RulesError {
    /// The problems, sorted by file then line.
    pub problems: Vec<Problem>,
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for p in &self.problems {
            if !first {
                f.write_str("\n")?;
            }
            first = false;
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

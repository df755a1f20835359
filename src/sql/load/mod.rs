//! `LOAD DATA LOCAL INFILE` into a rule table, the pure part: the
//! statement read ([`stmt`]), the client's file cut into rows exactly as
//! MariaDB's `READ_INFO` cuts it ([`cut`]), and each row written again for
//! its shard's own `LOAD DATA LOCAL` stream with its id supplied ([`emit`]).
//!
//! Why re-emit the rows' own bytes instead of turning them into INSERTs:
//! the shard then reads every field itself, by the same FIELDS/LINES
//! options, CHARACTER SET, column list, `@var`s and `SET` clauses, so
//! conversions, truncation warnings and `REPLACE`/`IGNORE` handling are
//! MariaDB's own, and it is the fastest path (no SQL text is built per
//! row). idgate only has to find where rows and the id field start and end.

pub mod cut;
pub mod emit;
pub mod stmt;

#[cfg(test)]
mod tests;

//! `IDGATE SET FLOOR <generator> <value>` with its checks, shared by the
//! statement and by `SETVAL(idgate.g, n)` (`sequence.rs`), which means the
//! same.

use crate::frontend::session::{CmdError, Session};
use crate::idgen::Generator;
use crate::protocol::codes;

impl Session {
    /// No id at or below `value` is issued by generator `name` afterwards,
    /// by any idgate process (durable in the store; the floor never moves
    /// down).
    ///
    /// Errors: 1210 when `value` would leave fewer than
    /// `allocator.floor_headroom` ids below the generator's `max`; the
    /// allocator's own (store, scrambled generator) as 1105.
    pub(in crate::frontend) async fn set_floor_checked(
        &self,
        g: &Generator,
        name: &str,
        value: u64,
    ) -> Result<(), CmdError> {
        let (first, max) = g.bounds();
        let keep = self.shared.config.allocator.floor_headroom.ids(first, max);
        if value > max.saturating_sub(keep) {
            return Err(CmdError::Refused(
                codes::ER_WRONG_ARGUMENTS,
                format!(
                    "idgate: IDGATE SET FLOOR {name} {value} refused: it would leave generator {name:?} fewer than {keep} ids before its max {max} (allocator.floor_headroom); the highest floor allowed is {}",
                    max.saturating_sub(keep)
                ),
            ));
        }
        g.set_floor(value)
            .await
            .map_err(|e| CmdError::Refused(codes::ER_UNKNOWN_ERROR, e.to_string()))
    }
}

//! `Generator`: the handle the session code takes ids from, dispatching to a
//! sequence or a snowflake, and its background task.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::clock::Clock;
use super::error::IdgenError;
use super::params::Params;
use super::scramble::Scrambler;
use super::sequence::Sequence;
use super::snowflake::Snowflake;
use super::store::Store;
use crate::rules::spec::GeneratorKind;

/// The algorithm behind a generator.
// One per generator, behind an `Arc`: its size does not matter, and a box
// would add a pointer chase to every id.
#[allow(clippy::large_enum_variant)]
enum Imp {
    /// Dense integers from reserved segments.
    Sequence(Sequence),
    /// Timestamp | node | sequence.
    Snowflake(Snowflake),
}

/// One named id generator of a rule file. Shared (`Arc`) by every session.
pub struct Generator {
    /// The algorithm and its state.
    imp: Imp,
    /// `scramble = true` sequences: ids are this permutation of the
    /// sequence's values (see `scramble.rs`, and `observe` for explicit ids).
    scramble: Option<Arc<Scrambler>>,
    /// Formats with a date: the counter restarts every day.
    daily: Option<Daily>,
}

/// The day state of a sequence whose `format` has a date (`format.rs`).
///
/// The sequence runs in the id space itself. A day starts with
/// `set_floor(base(day))` (`{date}{seq:0}`), which returns once every
/// idgate process on the store has skipped every id up to it: the counter
/// restarts at 1, and no process issues an id of an older day afterwards.
/// A process moves to a day when its own clock reaches it, or when it
/// finds the floor already there (another process's clock reached it:
/// the cluster's clock is the newest one). Ids past the day's counter
/// width are refused (exhausted) until the next day.
struct Daily {
    /// The format.
    format: Arc<super::format::Format>,
    /// Where days are read.
    clock: Arc<dyn Clock>,
    /// The day this process issues in (`i64::MIN`: none yet).
    day: std::sync::atomic::AtomicI64,
    /// The day whose counter ran out (refused without taking ids).
    exhausted: std::sync::atomic::AtomicI64,
}

impl Daily {
    fn today(&self) -> i64 {
        self.format.day_at(self.clock.wall_ms())
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("name", &self.name())
            .field("kind", &self.kind())
            .finish()
    }
}

/// A read-only view of a generator for admin commands and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorStats {
    /// The generator's name.
    pub name: String,
    /// `sequence` or `snowflake`.
    pub kind: GeneratorKind,
    /// Sequence: end (exclusive) of the highest segment this process reserved.
    /// Snowflake: the persisted ceiling tick of its node.
    pub high_water: u64,
    /// The next id this process would issue (without waiting for the store).
    pub next_id: u64,
    /// Ids this process can issue from memory before it needs the store.
    /// Snowflake: positions left below the ceiling at the current clock.
    pub cached_remaining: u64,
    /// Sequence: size of the next reservation (adaptive). Snowflake: 0.
    pub batch: u64,
    /// Sequence: measured consumption in ids/s. Snowflake: 0 (not measured:
    /// counting would cost an atomic per call on the fast path).
    pub rate_per_sec: f64,
    /// Sequence: ids issued (or skipped) by this process. Snowflake: 0.
    pub issued: u64,
    /// Sequence: highest id seen by `observe`/`set_floor` (0: none).
    pub floor: u64,
    /// Requests that found the cache exhausted and had to wait for the store.
    pub waits: u64,
    /// Failed store calls.
    pub store_errors: u64,
    /// Successful store writes (about rate / batch per second in steady state).
    pub store_writes: u64,
    /// Snowflake: the leased node id, if any.
    pub node_id: Option<u64>,
    /// Snowflake: whether it may issue (holds a valid lease). Sequence: true.
    pub lease_valid: bool,
    /// The last store error, or why a snowflake has no node id.
    pub last_error: Option<String>,
    /// Snowflake: how far (ms) this node's clock is behind the cluster
    /// high-water, while it issues from a logical clock (0: it uses its
    /// wall clock). Sequence: 0.
    pub clock_skew_ms: u64,
}

/// Most ids one request may ask for: a bogus row count must not burn through
/// a generator's whole id space (or push a snowflake's timestamp years ahead).
pub const MAX_IDS_PER_REQUEST: u64 = 1 << 32;

impl Generator {
    fn check_n(&self, n: u64) -> Result<(), IdgenError> {
        if n > MAX_IDS_PER_REQUEST {
            return Err(IdgenError::BadRequest {
                generator: self.name().to_string(),
                detail: format!("{n} ids asked at once, at most {MAX_IDS_PER_REQUEST}"),
            });
        }
        Ok(())
    }

    /// A generator not yet prepared.
    pub(crate) fn new(
        name: &str,
        params: Params,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        timeout: Duration,
    ) -> Generator {
        let mut scramble = None;
        let mut daily = None;
        let imp = match params {
            Params::Sequence(p) => {
                scramble = p.scramble.clone();
                daily = p.format.clone().filter(|f| f.daily()).map(|format| Daily {
                    format,
                    clock: clock.clone(),
                    day: std::sync::atomic::AtomicI64::new(i64::MIN),
                    exhausted: std::sync::atomic::AtomicI64::new(i64::MIN),
                });
                Imp::Sequence(Sequence::new(name, p, store, clock, timeout))
            }
            Params::Snowflake(p) => Imp::Snowflake(Snowflake::new(name, p, store, clock, timeout)),
        };
        Generator {
            imp,
            scramble,
            daily,
        }
    }

    /// Reserves the first segment / leases a node id and persists a ceiling.
    pub(crate) async fn prepare(&self) -> Result<(), IdgenError> {
        match &self.imp {
            Imp::Sequence(s) => s.prepare().await,
            Imp::Snowflake(s) => s.prepare().await,
        }
    }

    /// The generator's name.
    pub fn name(&self) -> &str {
        match &self.imp {
            Imp::Sequence(s) => &s.name,
            Imp::Snowflake(s) => &s.name,
        }
    }

    /// Whether a rule reload may give this generator the parameters `p`:
    /// only a sequence's `batch`, `min_batch`, `max_batch`,
    /// `segment_seconds` and `max` may differ from the ones it runs with.
    pub(crate) fn check_tune(&self, p: &Params) -> Result<(), String> {
        match (&self.imp, p) {
            (Imp::Sequence(s), Params::Sequence(new)) => {
                let cur = s.params();
                let same = |a: &super::params::SequenceParams| {
                    let mut a = a.clone();
                    a.batch = new.batch;
                    a.min_batch = new.min_batch;
                    a.max_batch = new.max_batch;
                    a.segment_ms = new.segment_ms;
                    a.max = new.max;
                    a
                };
                if same(cur) != *new {
                    return Err("only batch, min_batch, max_batch, segment_seconds and max may change while idgate runs".into());
                }
                Ok(())
            }
            (Imp::Snowflake(s), Params::Snowflake(new)) if s.params() == new => Ok(()),
            (Imp::Snowflake(_), Params::Snowflake(_)) => {
                Err("a snowflake generator's layout, epoch and time unit cannot change while idgate runs".into())
            }
            _ => Err("its kind cannot change while idgate runs".into()),
        }
    }

    /// The parameters it runs with now (a sequence's tunables as the last
    /// reload left them).
    pub(crate) fn current_params(&self) -> Params {
        match &self.imp {
            Imp::Sequence(s) => Params::Sequence(s.current_params()),
            Imp::Snowflake(s) => Params::Snowflake(s.params().clone()),
        }
    }

    /// Applies parameters [`Generator::check_tune`] accepted.
    pub(crate) fn tune(&self, p: &Params) -> Result<(), String> {
        self.check_tune(p)?;
        match (&self.imp, p) {
            (Imp::Sequence(s), Params::Sequence(new)) => s.tune(new),
            _ => Ok(()),
        }
    }

    /// The plain sequence behind this generator (no scramble, no format):
    /// the only kind a table may move from or to while idgate runs.
    fn plain(&self) -> Option<&Sequence> {
        match &self.imp {
            Imp::Sequence(s) if self.scramble.is_none() && s.params().format.is_none() => Some(s),
            _ => None,
        }
    }

    /// Bound above every id this generator ever issued, read from the
    /// store (plain sequences only).
    async fn issued_below(&self, to: &str) -> Result<u64, String> {
        let s = self.plain().ok_or_else(|| not_plain(self.name(), to))?;
        s.store_hwm().await.map_err(|e| e.to_string())
    }

    /// For a table a rule reload moves from generator `old` to this one:
    /// `Ok` when every id this one issues from now on (by any process) is
    /// above every id `old` ever issued, read from the store; else why not.
    /// Plain sequences only (a move from or to a snowflake, scrambled or
    /// formatted generator is refused).
    pub async fn check_takes_over(&self, old: &Generator) -> Result<(), String> {
        let new = self
            .plain()
            .ok_or_else(|| not_plain(old.name(), self.name()))?;
        let issued_below = old.issued_below(self.name()).await?;
        let floor = new.store_floor().await.map_err(|e| e.to_string())?;
        let lowest = new.params().start.max(floor.saturating_add(1));
        takes_over(old.name(), self.name(), lowest, issued_below)
    }

    /// Like [`Generator::check_takes_over`] from this generator to one the
    /// same reload adds (`rule`): its ids start at its `start`.
    pub async fn check_new_takes_over(
        &self,
        rule: &crate::rules::spec::GeneratorRule,
    ) -> Result<(), String> {
        let plain = rule.kind == GeneratorKind::Sequence
            && rule.format.is_none()
            && rule.scramble != Some(true);
        if !plain {
            return Err(not_plain(self.name(), &rule.name));
        }
        let issued_below = self.issued_below(&rule.name).await?;
        takes_over(
            self.name(),
            &rule.name,
            rule.start.unwrap_or(1),
            issued_below,
        )
    }

    /// The smallest and the largest id this generator may issue.
    pub fn bounds(&self) -> (u64, u64) {
        match &self.imp {
            Imp::Sequence(s) => (s.params().start, s.max()),
            Imp::Snowflake(s) => {
                let p = s.params();
                let bits = p.timestamp_bits + p.node_bits + p.sequence_bits;
                (0, u64::MAX >> (64 - bits.min(63)))
            }
        }
    }

    /// `sequence` or `snowflake`.
    pub fn kind(&self) -> GeneratorKind {
        match &self.imp {
            Imp::Sequence(_) => GeneratorKind::Sequence,
            Imp::Snowflake(_) => GeneratorKind::Snowflake,
        }
    }

    /// Appends `n` fresh ids to `out`, in increasing order.
    ///
    /// Served from memory in steady state without awaiting anything; waits
    /// for the store only when the cache is exhausted, and then at most the
    /// allocator's timeout. On error nothing is appended.
    ///
    /// Errors: [`IdgenError::Unavailable`] (store down and cache empty),
    /// [`IdgenError::Exhausted`], [`IdgenError::NoNode`] (snowflake without a
    /// node-id lease), [`IdgenError::BadRequest`] (`n` over
    /// [`MAX_IDS_PER_REQUEST`], or overflowing 64 bits with the increment).
    #[inline]
    pub async fn next(&self, n: u64, out: &mut Vec<u64>) -> Result<(), IdgenError> {
        // The sync fast path first, so the common case never enters the
        // larger state machine of the slow path.
        if self.try_next(n, out)? {
            return Ok(());
        }
        // Boxed: the slow path's state machine is large (store calls,
        // timeouts), and an inline one would make every call's future large.
        if let (Some(d), Imp::Sequence(s)) = (&self.daily, &self.imp) {
            return Box::pin(self.next_daily(d, s, n, out)).await;
        }
        let before = out.len();
        match &self.imp {
            Imp::Sequence(s) => Box::pin(s.next(n, out)).await?,
            Imp::Snowflake(s) => Box::pin(s.next(n, out)).await?,
        }
        self.scramble_ids(&mut out[before..]);
        Ok(())
    }

    fn day_exhausted(&self, d: &Daily, day: i64) -> IdgenError {
        d.exhausted
            .fetch_max(day, std::sync::atomic::Ordering::AcqRel);
        IdgenError::Exhausted {
            generator: self.name().to_string(),
            max: d.format.render(day, d.format.seq_max()).unwrap_or(0),
        }
    }

    /// Checks ids just appended at `out[before..]` are of the current
    /// day. `Ok(true)`: they are. `Ok(false)`: they were of a later day
    /// that another process started (the floor is there): the day moved,
    /// the ids are dropped (a gap), take again. Errors: the day's counter
    /// ran out (`Exhausted`; the ids are dropped).
    fn check_day(
        &self,
        d: &Daily,
        s: &Sequence,
        out: &mut Vec<u64>,
        before: usize,
    ) -> Result<bool, IdgenError> {
        use std::sync::atomic::Ordering::AcqRel;
        let cur = d.day.load(Ordering::Acquire);
        let bad = out[before..]
            .iter()
            .copied()
            .find(|&id| d.format.decode(id).is_none_or(|(day, _)| day != cur));
        let Some(bad) = bad else {
            return Ok(true);
        };
        out.truncate(before);
        match d.format.decode(bad) {
            Some((day, _))
                if day > cur
                    && d.format
                        .render(day, 0)
                        .is_some_and(|base| s.view().floor >= base) =>
            {
                d.day.fetch_max(day, AcqRel);
                Ok(false)
            }
            _ => Err(self.day_exhausted(d, cur)),
        }
    }

    /// The slow path of a daily formatted sequence: starts a new day when
    /// the clock reached it, then takes and checks ids.
    async fn next_daily(
        &self,
        d: &Daily,
        s: &Sequence,
        n: u64,
        out: &mut Vec<u64>,
    ) -> Result<(), IdgenError> {
        for _ in 0..8 {
            let today = d.today();
            let cur = d.day.load(Ordering::Acquire);
            if today > cur {
                let Some(base) = d.format.render(today, 0) else {
                    return Err(self.day_exhausted(d, today));
                };
                s.set_floor(base).await?;
                d.day.fetch_max(today, Ordering::AcqRel);
                continue;
            }
            if d.exhausted.load(Ordering::Acquire) >= cur {
                return Err(self.day_exhausted(d, cur));
            }
            let before = out.len();
            s.next(n, out).await?;
            if self.check_day(d, s, out, before)? {
                return Ok(());
            }
        }
        Err(IdgenError::BadRequest {
            generator: self.name().to_string(),
            detail: "the day kept changing while ids were taken".into(),
        })
    }

    /// Maps freshly issued sequence values to scrambled ids, in place.
    #[inline]
    fn scramble_ids(&self, ids: &mut [u64]) {
        if let Some(sc) = &self.scramble {
            for id in ids {
                // Values are in [start, max] within [1, 2^bits): always mapped.
                if let Some(v) = sc.scramble(*id) {
                    *id = v;
                }
            }
        }
    }

    /// Refuses an operation on ranges of ids for a daily formatted generator
    /// (a range could cross into the next day).
    fn not_daily(&self, op: &'static str) -> Result<(), IdgenError> {
        match self.daily {
            Some(_) => Err(IdgenError::Unsupported {
                generator: self.name().to_string(),
                op,
                kind: "daily formatted (a date in `format`)",
            }),
            None => Ok(()),
        }
    }

    /// Refuses an operation on ranges of ids for a scrambled generator.
    fn not_scrambled(&self, op: &'static str) -> Result<(), IdgenError> {
        match self.scramble {
            Some(_) => Err(IdgenError::Unsupported {
                generator: self.name().to_string(),
                op,
                kind: "scrambled (scramble = true)",
            }),
            None => Ok(()),
        }
    }

    /// The synchronous fast path: `Ok(true)` if `n` ids were appended from
    /// memory, `Ok(false)` if the caller must use [`Generator::next`] (cache
    /// exhausted; nothing appended).
    #[inline]
    pub fn try_next(&self, n: u64, out: &mut Vec<u64>) -> Result<bool, IdgenError> {
        self.check_n(n)?;
        if let (Some(d), Imp::Sequence(s)) = (&self.daily, &self.imp) {
            let cur = d.day.load(Ordering::Acquire);
            if d.today() > cur || d.exhausted.load(Ordering::Acquire) >= cur {
                return Ok(false); // the slow path starts the day or says why
            }
            let before = out.len();
            if !s.try_next(n, out)? {
                return Ok(false);
            }
            return self.check_day(d, s, out, before);
        }
        let before = out.len();
        let done = match &self.imp {
            Imp::Sequence(s) => s.try_next(n, out)?,
            Imp::Snowflake(s) => s.try_next(n, out)?,
        };
        if done {
            self.scramble_ids(&mut out[before..]);
        }
        Ok(done)
    }

    /// An explicit id seen in a statement, before its client gets the
    /// reply. After this returns `Ok`, no idgate process on the same store
    /// issues `id` (and this process issues nothing at or below it).
    ///
    /// Costs one short lock and nothing else when no other process can
    /// hold `id` (below what every process may still issue, in a range this
    /// process reserved); otherwise waits for the store, bounded by the
    /// allocator's timeout (module doc of `sequence.rs` / `snowflake.rs`,
    /// "Explicit ids across processes").
    ///
    /// Errors: [`IdgenError::Unconfirmed`] when that could not be made
    /// sure (store down, another process that did not acknowledge): the
    /// statement must not be reported as a success.
    #[inline]
    pub async fn observe(&self, id: u64) -> Result<(), IdgenError> {
        if self.observe_local(id) {
            return Ok(());
        }
        if let Some(d) = &self.daily {
            let day = d.format.decode(id).map_or(i64::MIN, |(day, _)| day);
            if day > d.day.load(Ordering::Acquire).max(d.today()) {
                return Err(IdgenError::Unconfirmed {
                    generator: self.name().to_string(),
                    id,
                    detail: "an explicit id of a day that has not begun: taking it would make today's ids jump into that day".into(),
                });
            }
        }
        if let (Imp::Sequence(s), Some(sc)) = (&self.imp, &self.scramble) {
            // observe_local said the value is not in our reservations.
            let Some(v) = sc.unscramble(id) else {
                return Ok(());
            };
            if v >= Box::pin(s.store_hwm()).await? {
                return Err(IdgenError::Unconfirmed {
                    generator: s.name.clone(),
                    id,
                    detail: "a scrambled generator accepts an explicit id only if it has issued it already (its sequence value is below every reservation's end); this one it could still issue later".into(),
                });
            }
            return Box::pin(s.confirm(v)).await;
        }
        // Boxed: rare, and its state machine is large.
        match &self.imp {
            Imp::Sequence(s) => Box::pin(s.confirm(id)).await,
            Imp::Snowflake(s) => Box::pin(s.confirm(id)).await,
        }
    }

    /// The synchronous part of [`Generator::observe`]: skips `id` in this
    /// process; `true` when no other process can issue it either (else
    /// `observe` must run to confirm it).
    #[inline]
    pub fn observe_local(&self, id: u64) -> bool {
        if let Some(d) = &self.daily {
            // An id of another format is never issued; one of a future
            // day is refused by `observe`; one of today or before raises
            // the floor in the id space, as for any sequence (an id of a
            // past day is below the floor already).
            match d.format.decode(id) {
                None => return true,
                Some((day, _)) if day > d.day.load(Ordering::Acquire).max(d.today()) => {
                    return false
                }
                Some(_) => {}
            }
        }
        if let (Imp::Sequence(s), Some(sc)) = (&self.imp, &self.scramble) {
            // The sequence value behind the id: below our reservations'
            // end, the usual floor applies (it moves by at most our
            // cache); beyond it, `observe` decides.
            return match sc.unscramble(id) {
                None => true, // outside [1, 2^bits): never issued
                Some(v) if v < s.reserved_end() => s.observe(v),
                Some(_) => false,
            };
        }
        match &self.imp {
            Imp::Sequence(s) => s.observe(id),
            Imp::Snowflake(s) => s.observe(id),
        }
    }

    /// Raises the floor: after this returns, no id at or below `value` is
    /// issued by this process, and the floor is durable in the store (every
    /// later reservation, by any process, starts above it). Never moves down.
    ///
    /// Snowflake: applies to this process's node: its timestamp moves past
    /// the one of `value`, and the ceiling persisted for the node covers it.
    pub async fn set_floor(&self, value: u64) -> Result<(), IdgenError> {
        self.not_scrambled("a floor")?;
        match &self.imp {
            Imp::Sequence(s) => s.set_floor(value).await,
            Imp::Snowflake(s) => s.set_floor(value).await,
        }
    }

    /// Reserves a block of `count` ids for a bulk loader: they are never
    /// issued to anyone else. With `increment` k, the ids are the values of
    /// the range congruent to `start` modulo k. Sequence only.
    ///
    /// Errors: [`IdgenError::Exhausted`] if the whole block does not fit below
    /// `max` (nothing is reserved then), [`IdgenError::Store`],
    /// [`IdgenError::Unsupported`] for snowflakes.
    pub async fn reserve(&self, count: u64) -> Result<Range<u64>, IdgenError> {
        self.check_n(count)?;
        self.not_scrambled("reserve (a range of ids)")?;
        self.not_daily("reserve (a range of ids)")?;
        match &self.imp {
            Imp::Sequence(s) => s.reserve(count).await,
            Imp::Snowflake(s) => Err(IdgenError::Unsupported {
                generator: s.name.clone(),
                op: "reserve",
                kind: "snowflake",
            }),
        }
    }

    /// `n` consecutive ids (`increment` apart), e.g. for Redis `INCRBY`:
    /// returns the first; the last is `first + (n - 1) * increment`.
    /// Served from the current segment when it holds them; otherwise from
    /// the next cached segment (the rest of the current one becomes a gap),
    /// or from a block reserved in the store for it. Sequence only.
    ///
    /// Errors: as [`Generator::reserve`]; [`IdgenError::BadRequest`] for
    /// `n == 0`; [`IdgenError::Unsupported`] for snowflakes (their ids are
    /// not consecutive).
    pub async fn next_block(&self, n: u64) -> Result<u64, IdgenError> {
        self.check_n(n)?;
        self.not_scrambled("a block of consecutive ids")?;
        self.not_daily("a block of consecutive ids")?;
        match &self.imp {
            Imp::Sequence(s) => s.next_block(n).await,
            Imp::Snowflake(s) => Err(IdgenError::Unsupported {
                generator: s.name.clone(),
                op: "a block of consecutive ids",
                kind: "snowflake",
            }),
        }
    }

    /// Step between consecutive ids of a sequence (1 for snowflakes).
    pub fn increment(&self) -> u64 {
        match &self.imp {
            Imp::Sequence(s) => s.increment(),
            Imp::Snowflake(_) => 1,
        }
    }

    /// A read-only view for admin commands and metrics. Cheap; takes short
    /// locks only.
    pub fn stats(&self) -> GeneratorStats {
        match &self.imp {
            Imp::Sequence(s) => {
                let v = s.view();
                GeneratorStats {
                    name: s.name.clone(),
                    kind: GeneratorKind::Sequence,
                    high_water: v.high_water,
                    next_id: match &self.scramble {
                        Some(sc) => sc.scramble(v.next_id).unwrap_or(v.next_id),
                        None => v.next_id,
                    },
                    cached_remaining: v.cached_remaining,
                    batch: v.batch,
                    rate_per_sec: v.rate,
                    issued: v.issued,
                    floor: v.floor,
                    waits: v.waits,
                    store_errors: v.store_errors,
                    store_writes: v.store_writes,
                    node_id: None,
                    lease_valid: true,
                    last_error: v.last_error,
                    clock_skew_ms: 0,
                }
            }
            Imp::Snowflake(s) => {
                let v = s.view();
                GeneratorStats {
                    name: s.name.clone(),
                    kind: GeneratorKind::Snowflake,
                    high_water: v.high_water,
                    next_id: v.next_id,
                    cached_remaining: v.cached_remaining,
                    batch: 0,
                    rate_per_sec: 0.0,
                    issued: 0,
                    floor: 0,
                    waits: v.waits,
                    store_errors: v.store_errors,
                    store_writes: v.store_writes,
                    node_id: v.node,
                    lease_valid: v.lease_valid,
                    last_error: v.last_error,
                    clock_skew_ms: v.clock_skew_ms,
                }
            }
        }
    }

    fn wake(&self) -> Arc<Notify> {
        match &self.imp {
            Imp::Sequence(s) => s.wake.clone(),
            Imp::Snowflake(s) => s.wake.clone(),
        }
    }

    /// Lets the generator reach itself from store callbacks (a lost member
    /// record drops the cache at once). Called once it is shared.
    pub(crate) fn bind(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        if let Imp::Sequence(s) = &self.imp {
            let _ = s.on_lost.set(Arc::new(move || {
                if let Some(g) = weak.upgrade() {
                    if let Imp::Sequence(s) = &g.imp {
                        s.drop_cache();
                    }
                }
            }));
        }
    }

    /// Stops background work and gives node ids back.
    pub(crate) async fn stop(&self) {
        match &self.imp {
            Imp::Sequence(s) => {
                s.stopped.store(true, Ordering::Relaxed);
                s.leave().await;
            }
            Imp::Snowflake(s) => {
                s.stopped.store(true, Ordering::Relaxed);
                s.release().await;
            }
        }
        self.wake().notify_one();
    }

    fn stopped(&self) -> bool {
        match &self.imp {
            Imp::Sequence(s) => s.stopped.load(Ordering::Relaxed),
            Imp::Snowflake(s) => s.stopped.load(Ordering::Relaxed),
        }
    }

    /// One round of background work; `Err` means "back off".
    pub(crate) async fn background_round(&self) -> Result<(), String> {
        match &self.imp {
            Imp::Sequence(s) => s.background_round().await.map_err(|e| e.to_string()),
            Imp::Snowflake(s) => s.background_round().await.map_err(|e| e.to_string()),
        }
    }

    fn period(&self) -> Duration {
        match &self.imp {
            Imp::Sequence(_) => Duration::from_secs(1),
            Imp::Snowflake(s) => s.period(),
        }
    }
}

impl Generator {
    /// Sequence: the floor published by other processes, if the store has any.
    pub(crate) fn follow_floor(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match &self.imp {
            Imp::Sequence(s) => s.follow_floor(),
            Imp::Snowflake(_) => None,
        }
    }
}

/// Applies the floor other processes publish: an explicit id one of them saw
/// is skipped here too, even inside this process's cached segments. Ends when
/// the generator is gone or the store stops following.
pub(crate) async fn run_follow(gen: Weak<Generator>, mut rx: tokio::sync::watch::Receiver<u64>) {
    loop {
        let changed = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
        let Some(g) = gen.upgrade() else { return };
        match changed {
            Ok(Ok(())) => {
                let v = *rx.borrow_and_update();
                if let (Imp::Sequence(s), true) = (&g.imp, v > 0) {
                    s.observe_published(v).await;
                }
            }
            Ok(Err(_)) => return,
            Err(_) => {} // just checking the generator is still there
        }
    }
}

/// Keeps a snowflake's cached tick fresh while it issues ids (see
/// `Snowflake::tick`). Ends with the generator.
pub(crate) async fn run_ticker(gen: Weak<Generator>) {
    let mut last = (0, 0);
    loop {
        let pause = match gen.upgrade() {
            Some(g) => match &g.imp {
                Imp::Snowflake(s) if !s.stopped.load(Ordering::Relaxed) => s.tick(&mut last),
                _ => return,
            },
            None => return,
        };
        tokio::time::sleep(pause).await;
    }
}

/// The background task of one generator: refills segments / extends the
/// ceiling / re-leases a node id, retrying with backoff while the store is
/// down. Holds only a weak reference between rounds, so a generator dropped
/// without shutdown (a simulated crash) stops it.
pub(crate) async fn run_background(gen: Weak<Generator>) {
    let Some(wake) = gen.upgrade().map(|g| g.wake()) else {
        return;
    };
    let mut backoff = Duration::from_millis(50);
    loop {
        let Some(g) = gen.upgrade() else { return };
        if g.stopped() {
            return;
        }
        let result = g.background_round().await;
        let period = g.period();
        drop(g);
        match result {
            Ok(()) => {
                backoff = Duration::from_millis(50);
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(period) => {}
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "id generator background work failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

fn not_plain(from: &str, to: &str) -> String {
    format!(
        "moving a table from generator {from:?} to {to:?} while idgate runs is supported between plain sequences only (no snowflake, scramble or format)"
    )
}

/// `Ok` if generator `to`, whose ids from now on are at least `lowest`,
/// stays above `from`'s, all below `issued_below`.
fn takes_over(from: &str, to: &str, lowest: u64, issued_below: u64) -> Result<(), String> {
    if lowest >= issued_below {
        return Ok(());
    }
    let top = issued_below.saturating_sub(1);
    Err(format!(
        "generator {to:?} may still issue ids from {lowest}, and {from:?} has issued ids up to {top}: raise its floor first (IDGATE SET FLOOR {to} {top}), or give the new generator a start above {top}"
    ))
}

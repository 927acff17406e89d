//! What reading a trace found besides its events: what could not be read, where and
//! when it was written, and the lines that say so.
//!
//! Two kinds of trouble are told apart because they mean different things to the user:
//! a trace *cut short* (no end record: the process was killed or the disk filled up; at
//! most the tail is missing) and a *damaged* trace (bytes inside the file that are not
//! what the writer wrote: storage or copy errors; anything may be missing).

/// What was lost at one place of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Bytes that are not intact chunks (a bad checksum, a broken chunk header,
    /// garbage); reading went on at the next intact chunk.
    Damaged,
    /// The file ends inside a chunk: a write cut off.
    TornTail,
    /// A chunk that passed its checksum but whose events would not expand or decode, or
    /// whose kind no reader of this file's version knows (its header was changed).
    Undecodable,
    // The chunk numbers of format 2.6 (see `crate::seq`); never in an older file.
    /// A copy of the chunk numbered `seq`, already read (same number, same checksum): not
    /// read again. Nothing is missing for it.
    Replayed { seq: u16 },
    /// An intact chunk numbered `seq` out of place after the chunk numbered `last`:
    /// behind it, or ahead while the chunks after it go on from `last` (a reordered chunk,
    /// or another file's): not read.
    OutOfOrder { seq: u16, last: u16 },
    /// The chunks numbered `from` to `to` (`chunks` of them, modulo 2^16) are missing
    /// where nothing lies between the chunks before and after them. Those chunks are read.
    Missing { from: u16, to: u16 },
    /// Intact chunks after the chunk that holds the end record: not read (nothing of this
    /// trace is written after its end).
    AfterEnd,
    /// An intact chunk without a valid number in a file whose chunks are numbered (its
    /// header was changed, or it is an older writer's chunk: another file's): not read.
    Unnumbered,
}

impl LossKind {
    /// Chunks that are not records of this trace: a copy of one read, or chunks after its
    /// end. Set aside, they are not counted as lost.
    pub fn is_extra(self) -> bool {
        matches!(self, LossKind::Replayed { .. } | LossKind::AfterEnd)
    }

    /// Its name in machine-readable output.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Damaged => "damaged",
            LossKind::TornTail => "torn_tail",
            LossKind::Undecodable => "undecodable",
            LossKind::Replayed { .. } => "replayed",
            LossKind::OutOfOrder { .. } => "out_of_order",
            LossKind::Missing { .. } => "missing",
            LossKind::AfterEnd => "after_end",
            LossKind::Unnumbered => "unnumbered",
        }
    }

    /// Damage: anything but a torn tail (a write cut off, at the end of a file).
    fn is_damage(self) -> bool {
        self != LossKind::TornTail
    }
}

/// One place of a file where records were lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub kind: LossKind,
    /// File offset of the first byte given up, or of the chunk whose events were lost.
    pub offset: u64,
    /// Bytes given up (0 where a chunk was kept and only some of its events were lost).
    pub bytes: u64,
    /// Chunks given up whose headers could still be read (a lower bound).
    pub chunks: u64,
    /// Events those chunk headers declared, or that failed to decode. Where a chunk's
    /// header was unreadable its events are not counted: a lower bound then.
    pub events: u64,
    /// Latest event time of the last intact chunk before the loss.
    pub after_ns: Option<u64>,
    /// Latest event time of the first intact chunk after it (when that chunk was
    /// written): the lost records were written between `after_ns` and this.
    pub before_ns: Option<u64>,
    /// Intact chunks read before it, to place it in time (see `ChunkReader`).
    pub(crate) frame: u64,
}

/// What was found while reading, beyond the events.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadStats {
    /// Intact chunks read (metadata included).
    pub chunks: u64,
    pub events: u64,
    /// The file ends inside a chunk (a write cut off): that tail was dropped.
    pub truncated_tail: bool,
    /// Offset of the first damaged stretch (a torn tail is not damage).
    pub corrupt_at: Option<u64>,
    /// Bytes not read: damaged stretches, a torn tail, and chunks set aside (out of
    /// sequence, or after the end).
    pub bytes_lost: u64,
    /// Events skipped because their tag is newer than this reader.
    pub unknown_events: u64,
    /// Events lost inside chunks that passed their checksum (would not expand or
    /// decode).
    pub bad_events: u64,
    /// Version of the file, as its header says.
    pub major: u16,
    pub minor: u16,
    /// Every place records were lost or chunks set aside, in file order.
    pub lost: Vec<Loss>,
    /// The trace has no end record: its collector never wrote the `Stopped` state that
    /// finishes every file (killed, disk full, or still running).
    pub no_end: bool,
    /// The file header was damaged (what was wrong); the file was read as this
    /// reader's version.
    pub header_damage: Option<String>,
    /// The metadata chunk was lost: process details (pid, command, ...) are unknown.
    pub meta_lost: bool,
    /// First start time of a recorded interval, and latest event time, of what was read.
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// A second trace's file header stands at this offset: two traces were joined into
    /// one file (`cat a.gtrace b.gtrace`). Only the first was read; its events are not
    /// mixed with the second's.
    pub joined_at: Option<u64>,
}

impl ReadStats {
    /// Something inside the file is not what the writer wrote: records may be missing
    /// from anywhere in it.
    pub fn damaged(&self) -> bool {
        self.damaged_inside() || self.joined_at.is_some()
    }

    /// Damage inside this trace's own bytes (not counting a second trace joined after it).
    fn damaged_inside(&self) -> bool {
        self.lost.iter().any(|l| l.kind.is_damage())
            || self.bad_events > 0
            || self.header_damage.is_some()
            || self.meta_lost
    }

    /// The file ends early: the records of its last moments are missing.
    pub fn cut_short(&self) -> bool {
        self.truncated_tail || self.no_end
    }

    /// Records were lost, whether by damage or by a cut.
    pub fn lost_records(&self) -> bool {
        self.damaged() || self.cut_short()
    }

    /// Chunks and events lost to damage (not to a torn tail, and not chunks set aside as
    /// no records of this trace: see [`LossKind::is_extra`]): (bytes, chunks, events).
    pub fn damage_totals(&self) -> (u64, u64, u64) {
        let d = self
            .lost
            .iter()
            .filter(|l| l.kind.is_damage() && !l.kind.is_extra());
        d.fold((0, 0, 0), |(b, c, e), l| {
            (b + l.bytes, c + l.chunks, e + l.events)
        })
    }

    /// Chunks set aside as no records of this trace: (replayed copies, chunks after the
    /// end).
    fn extra_chunks(&self) -> (u64, u64) {
        self.lost.iter().fold((0, 0), |(r, a), l| match l.kind {
            LossKind::Replayed { .. } => (r + l.chunks, a),
            LossKind::AfterEnd => (r, a + l.chunks),
            _ => (r, a),
        })
    }

    /// Seconds into the trace, for a message.
    fn at(&self, ns: u64) -> String {
        let t0 = self.first_ns.unwrap_or(ns).min(ns);
        format!("{:.3} s", (ns - t0) as f64 / 1e9)
    }

    /// When the records of a loss were written, for a message ("" when unknown).
    fn when(&self, l: &Loss) -> String {
        match (l.after_ns, l.before_ns) {
            (Some(a), Some(b)) if b > a => {
                format!("written between {} and {}", self.at(a), self.at(b))
            }
            (Some(a), _) => format!("written after {}", self.at(a)),
            (None, Some(b)) => format!("written before {}", self.at(b)),
            (None, None) => String::new(),
        }
    }

    /// One line describing what was lost, if anything (the full account: every place,
    /// up to a few).
    pub fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(at) = self.joined_at {
            parts.push(joined_detail(at));
        }
        if self.damaged_inside() {
            parts.push(format!("trace damaged: {}", self.damage_detail(4)));
        }
        if let Some(c) = self.cut_detail() {
            parts.push(c);
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The loss in a few words, for a verdict line.
    pub fn brief(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(at) = self.joined_at {
            parts.push(format!("a second trace joined at byte {at} was not read"));
        }
        if self.damaged_inside() {
            let (bytes, chunks, events) = self.damage_totals();
            let mut what = Vec::new();
            if bytes > 0 {
                what.push(human_bytes(bytes));
            }
            if chunks > 0 {
                what.push(plural(chunks, "chunk"));
            }
            if events > 0 {
                what.push(format!("at least {events} events"));
            }
            let mut items = Vec::new();
            if !what.is_empty() {
                let places = self
                    .lost
                    .iter()
                    .filter(|l| l.kind.is_damage() && !l.kind.is_extra());
                let when = places.clone().map(|l| self.when(l)).find(|w| !w.is_empty());
                let mut s = format!("{} lost", what.join(", "));
                if let Some(w) = when {
                    s += &format!(" ({w}{})", more(places.count()));
                }
                items.push(s);
            }
            let (replayed, after_end) = self.extra_chunks();
            if replayed > 0 {
                items.push(format!("{} set aside", plural(replayed, "replayed chunk")));
            }
            if after_end > 0 {
                items.push(format!(
                    "{} after its end record set aside",
                    plural(after_end, "chunk")
                ));
            }
            if self.header_damage.is_some() {
                items.push("its header damaged".into());
            }
            if self.meta_lost {
                items.push("process details lost".into());
            }
            parts.push(format!("trace damaged: {}", items.join(", ")));
        }
        if self.cut_short() {
            parts.push(match self.last_ns {
                Some(t) => format!("trace cut short after {} (no end record)", self.at(t)),
                None => "trace cut short (no end record)".into(),
            });
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Where and how much damage, the first `max` places listed.
    fn damage_detail(&self, max: usize) -> String {
        let mut out = Vec::new();
        let (bytes, chunks, events) = self.damage_totals();
        if bytes > 0 {
            let mut s = format!("{} unreadable", human_bytes(bytes));
            if chunks > 0 {
                s += &format!(" ({}, at least {events} events)", plural(chunks, "chunk"));
            }
            out.push(s);
        } else if chunks > 0 {
            out.push(format!("{} missing", plural(chunks, "chunk")));
        } else if events > 0 {
            out.push(format!("{events} events lost"));
        }
        let places: Vec<&Loss> = self.lost.iter().filter(|l| l.kind.is_damage()).collect();
        for l in places.iter().take(max) {
            let when = self.when(l);
            let when = if when.is_empty() {
                String::new()
            } else {
                format!(", {when}")
            };
            out.push(match l.kind {
                LossKind::Undecodable if l.bytes == 0 => format!(
                    "{} in the checksummed chunk at byte {} would not decode{when}",
                    plural(l.events, "event"),
                    l.offset
                ),
                LossKind::Undecodable => format!(
                    "chunk at byte {} passed its checksum but would not decode ({} lost{when})",
                    l.offset,
                    plural(l.events, "event")
                ),
                LossKind::Replayed { seq } => format!(
                    "chunk at byte {} is a copy of chunk {seq}, already read: not read again",
                    l.offset
                ),
                LossKind::OutOfOrder { seq, last } => format!(
                    "chunk at byte {} is numbered {seq}, out of sequence after chunk {last} \
                     (reordered, or another file's): not read ({} lost{when})",
                    l.offset,
                    plural(l.events, "event")
                ),
                LossKind::Missing { from, to } => format!(
                    "{} before the chunk at byte {}{when}",
                    if from == to {
                        format!("chunk {from} missing")
                    } else {
                        format!("chunks {from} to {to} missing")
                    },
                    l.offset
                ),
                LossKind::AfterEnd => format!(
                    "{} after the end record, from byte {}: not read",
                    plural(l.chunks, "chunk"),
                    l.offset
                ),
                LossKind::Unnumbered => format!(
                    "chunk at byte {} has no valid sequence number (its header was changed, \
                     or it is another file's): not read ({} lost{when})",
                    l.offset,
                    plural(l.events, "event")
                ),
                LossKind::Damaged | LossKind::TornTail => {
                    format!("{} at byte {}{when}", human_bytes(l.bytes), l.offset)
                }
            });
        }
        if places.len() > max {
            out.push(format!("{} more places", places.len() - max));
        }
        if let Some(h) = &self.header_damage {
            out.push(format!(
                "header damaged ({h}), read as format {}.x",
                crate::VERSION_MAJOR
            ));
        }
        if self.meta_lost {
            out.push("metadata chunk lost: pid, host and command unknown".into());
        }
        out.join("; ")
    }

    /// Why and where the file ends early.
    fn cut_detail(&self) -> Option<String> {
        if !self.cut_short() {
            return None;
        }
        let mut s = "trace cut short: no end record (the process was killed, the disk filled up, or it is still running)".to_string();
        if let Some(t) = self.lost.iter().find(|l| l.kind == LossKind::TornTail) {
            s += &format!(
                "; the file is truncated inside a chunk at byte {}: {} of its last write torn off",
                t.offset,
                human_bytes(t.bytes)
            );
        }
        match self.last_ns {
            Some(t) => s += &format!("; nothing recorded after {} is in it", self.at(t)),
            None => s += "; no events were written before it ended",
        }
        Some(s)
    }
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn more(places: usize) -> String {
    match places {
        0 | 1 => String::new(),
        n => format!(", and {} more", plural(n as u64 - 1, "place")),
    }
}

/// Bytes with a binary unit.
pub fn human_bytes(b: u64) -> String {
    if b < 1024 {
        format!("{b} bytes")
    } else if b < 1 << 20 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// What to say of a file that holds a second trace from byte `at`.
fn joined_detail(at: u64) -> String {
    format!(
        "a second trace's header stands at byte {at}: two traces were joined into one file \
         (cat?); only the first was read. Split the file there (`head -c {at} FILE`, \
         `tail -c +{} FILE`) and give both parts",
        at + 1
    )
}

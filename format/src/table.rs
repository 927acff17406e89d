//! The machinery behind the event table ([`crate::event`]): field wire codecs, the
//! generic field visitor, and `define_events!`, the macro that turns one definition
//! per event kind into its struct (or `Event` variant), its tag, its encoding, its
//! decoding and its fields as the exporters see them.
//!
//! Every field is `name: Type => Codec`. A codec says how the value is written in the
//! event's body (after the tag byte and the body length):
//!
//! | codec | wire | value |
//! |---|---|---|
//! | [`V`] | LEB128 varint (u8, u16, u32 truncate what they read) | `U` |
//! | [`Sid`] | varint: an interned string id ([`crate::Event::Str`]) | `Str` |
//! | [`U8`] | one byte | `U` |
//! | [`Ts`] | zigzag delta against the previous timestamp of the chunk | `Time` |
//! | [`End`] | after a `Ts`: `end - start` (saturating) as a varint | `Time` |
//! | [`Corr`] | zigzag delta against the previous correlation id of the chunk | `U` |
//! | [`Zz`] | i32 zigzag varint | `I` |
//! | [`Na`] | "not available" ([`crate::ENV_NA`] / [`crate::ENV_NA64`]) as 0, else value + 1 | `U` or `Na` |
//! | [`Dev`] | device id + 1 (`u32::MAX`, "no device", is 0) | `U` or `Na` |
//! | [`Arr`] | `[u32; N]`: N varints | `Array` |
//! | [`Text`] | length varint, UTF-8 bytes | `Text` |
//! | [`Frames`] | count varint, then (file, function, line) varints per frame | `Frames` |
//!
//! `Opt<C>` is `C` for a field appended to an existing kind: a body from an older
//! writer ends before it, and the reader gives the field its default (`= value` in the
//! table, else the type's default) instead of reporting the body cut short.
//!
//! `Trail<C>` is `Opt<C>` that is also left off when written: a body ends before its
//! field when that field, and every field after it, holds its default. A field that is
//! set on few events (a pointer on allocation calls) then costs the others nothing, and
//! the bytes of an event that does not set it are those of the kind before the field.

use crate::wire::{Body, DecodeError, Delta, PyFrame};
use std::marker::PhantomData;

/// A field's value as the generic visitor hands it out ([`crate::Event::fields`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// An unsigned number (counts, ids, flags, bytes).
    U(u64),
    /// A signed number.
    I(i64),
    /// A timestamp (trace clock, ns): a start, an end or a point in time.
    Time(u64),
    /// An interned string's id: the text is in the trace's `Str` events.
    Str(u32),
    /// Text carried in the event itself.
    Text(&'a str),
    Array(&'a [u32]),
    Frames(&'a [PyFrame]),
    /// Not available (the `na` sentinel, or no device).
    Na,
}

/// What every event of the table has, whatever its kind (the generic exporters' view):
/// implemented by each kind's struct and by [`crate::Event`].
pub trait Fields {
    /// The kind's name (`kernel`, `host_copy`, ...), as `gputrace dump` types its lines.
    fn kind_name(&self) -> &'static str;
    /// The first timestamp field and, for a span, its end (`None`: no time field).
    fn span(&self) -> Option<(u64, Option<u64>)>;
    /// Calls `f` with the name and value of each field, in wire order.
    fn fields(&self, f: &mut dyn FnMut(&'static str, Value<'_>));
}

/// Gathers a span from the time fields, in order: the first start, the first end.
#[doc(hidden)]
#[derive(Default)]
pub struct Span(Option<u64>, Option<u64>);

impl Span {
    #[inline(always)]
    pub fn add(&mut self, t: Option<(bool, u64)>) {
        match t {
            Some((true, v)) if self.0.is_none() => self.0 = Some(v),
            Some((false, v)) if self.1.is_none() => self.1 = Some(v),
            _ => {}
        }
    }
    #[inline(always)]
    pub fn get(self) -> Option<(u64, Option<u64>)> {
        self.0.map(|s| (s, self.1))
    }
}

/// How one field of type `T` is written and read.
pub trait Codec<T> {
    /// Appended to an older kind: absent from older bodies, read as the default.
    const OPTIONAL: bool = false;
    /// Left off the end of the body when it holds its default and so does every field
    /// after it ([`Trail`]).
    const TRAILING: bool = false;
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &T);
    fn get(d: &mut Delta, b: &mut Body) -> Result<T, DecodeError>;
    fn value(v: &T) -> Value<'_>;
    /// Whether `time` can give something (known at compile time: the span accessors
    /// look only at these fields).
    const TIME: bool = false;
    /// The value, for the codecs of times: `(true, t)` for a start or a point in time
    /// ([`Ts`]), `(false, t)` for an end ([`End`]).
    #[inline(always)]
    fn time(_: &T) -> Option<(bool, u64)> {
        None
    }
}

/// Unsigned integers stored as varints: widened to write, truncated when read.
pub trait Uint: Copy {
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

macro_rules! uint {
    ($($t:ty),*) => {$(
        impl Uint for $t {
            #[inline(always)]
            fn to_u64(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
        }
    )*};
}
uint!(u8, u16, u32, u64);

#[inline]
pub(crate) fn put_var(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Plain varint.
pub struct V;
impl<T: Uint> Codec<T> for V {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &T) {
        put_var(out, v.to_u64());
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<T, DecodeError> {
        Ok(T::from_u64(b.v()?))
    }
    fn value(v: &T) -> Value<'_> {
        Value::U(v.to_u64())
    }
}

/// An interned string id, as a varint.
pub struct Sid;
impl Codec<u32> for Sid {
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &u32) {
        V::put(d, out, v)
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<u32, DecodeError> {
        V::get(d, b)
    }
    fn value(v: &u32) -> Value<'_> {
        Value::Str(*v)
    }
}

/// One raw byte.
pub struct U8;
impl Codec<u8> for U8 {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &u8) {
        out.push(*v);
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<u8, DecodeError> {
        b.u8()
    }
    fn value(v: &u8) -> Value<'_> {
        Value::U(*v as u64)
    }
}

/// A timestamp: zigzag delta against the chunk's previous one.
pub struct Ts;
impl Codec<u64> for Ts {
    const TIME: bool = true;
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &u64) {
        let delta = v.wrapping_sub(d.last_ts) as i64;
        d.last_ts = *v;
        put_var(out, zigzag(delta));
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<u64, DecodeError> {
        d.last_ts = d.last_ts.wrapping_add(unzigzag(b.v()?) as u64);
        Ok(d.last_ts)
    }
    fn value(v: &u64) -> Value<'_> {
        Value::Time(*v)
    }
    #[inline(always)]
    fn time(v: &u64) -> Option<(bool, u64)> {
        Some((true, *v))
    }
}

/// The end of a span whose start (a [`Ts`]) is the field before: the duration.
pub struct End;
impl Codec<u64> for End {
    const TIME: bool = true;
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &u64) {
        put_var(out, v.saturating_sub(d.last_ts));
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<u64, DecodeError> {
        Ok(d.last_ts.saturating_add(b.v()?))
    }
    fn value(v: &u64) -> Value<'_> {
        Value::Time(*v)
    }
    #[inline(always)]
    fn time(v: &u64) -> Option<(bool, u64)> {
        Some((false, *v))
    }
}

/// A correlation id: zigzag delta against the chunk's previous one.
pub struct Corr;
impl Codec<u32> for Corr {
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &u32) {
        let delta = (*v as i64) - (d.last_corr as i64);
        d.last_corr = *v;
        put_var(out, zigzag(delta));
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<u32, DecodeError> {
        d.last_corr = (d.last_corr as i64).wrapping_add(unzigzag(b.v()?)) as u32;
        Ok(d.last_corr)
    }
    fn value(v: &u32) -> Value<'_> {
        Value::U(*v as u64)
    }
}

/// A signed 32-bit value, zigzag.
pub struct Zz;
impl Codec<i32> for Zz {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &i32) {
        put_var(out, zigzag(*v as i64));
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<i32, DecodeError> {
        Ok(unzigzag(b.v()?) as i32)
    }
    fn value(v: &i32) -> Value<'_> {
        Value::I(*v as i64)
    }
}

/// A value that may be "not available": the sentinel as 0, anything else as value + 1.
pub struct Na;
impl Codec<u64> for Na {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &u64) {
        put_var(
            out,
            if *v == crate::ENV_NA64 {
                0
            } else {
                v.wrapping_add(1)
            },
        );
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<u64, DecodeError> {
        Ok(match b.v()? {
            0 => crate::ENV_NA64,
            x => x - 1,
        })
    }
    fn value(v: &u64) -> Value<'_> {
        match *v {
            crate::ENV_NA64 => Value::Na,
            x => Value::U(x),
        }
    }
}
impl Codec<u32> for Na {
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &u32) {
        let w = if *v == crate::ENV_NA {
            u64::MAX
        } else {
            *v as u64
        };
        <Na as Codec<u64>>::put(d, out, &w)
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<u32, DecodeError> {
        Ok(match b.v()? {
            0 => crate::ENV_NA,
            x => (x - 1) as u32,
        })
    }
    fn value(v: &u32) -> Value<'_> {
        match *v {
            crate::ENV_NA => Value::Na,
            x => Value::U(x as u64),
        }
    }
}

/// A device id where `u32::MAX` (no device, the common case) is stored as 0.
pub struct Dev;
impl Codec<u32> for Dev {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &u32) {
        put_var(out, v.wrapping_add(1) as u64);
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<u32, DecodeError> {
        Ok((b.v()? as u32).wrapping_sub(1))
    }
    fn value(v: &u32) -> Value<'_> {
        match *v {
            u32::MAX => Value::Na,
            x => Value::U(x as u64),
        }
    }
}

/// A fixed array of u32 varints.
pub struct Arr;
impl<const N: usize> Codec<[u32; N]> for Arr {
    #[inline(always)]
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &[u32; N]) {
        v.iter().for_each(|x| put_var(out, *x as u64));
    }
    #[inline(always)]
    fn get(_: &mut Delta, b: &mut Body) -> Result<[u32; N], DecodeError> {
        let mut a = [0; N];
        for x in a.iter_mut() {
            *x = b.v()? as u32;
        }
        Ok(a)
    }
    fn value(v: &[u32; N]) -> Value<'_> {
        Value::Array(v)
    }
}

/// A string carried in the event: length, then UTF-8 bytes.
pub struct Text;
impl Codec<String> for Text {
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &String) {
        put_var(out, v.len() as u64);
        out.extend_from_slice(v.as_bytes());
    }
    fn get(_: &mut Delta, b: &mut Body) -> Result<String, DecodeError> {
        let n = b.v()? as usize;
        let at = b.offset();
        let s = b.slice(n)?;
        let s = std::str::from_utf8(s).map_err(|_| DecodeError::BadString(at))?;
        Ok(s.to_string())
    }
    fn value(v: &String) -> Value<'_> {
        Value::Text(v)
    }
}

/// Python frames: a count, then each frame's file, function and line.
pub struct Frames;
impl Codec<Vec<PyFrame>> for Frames {
    fn put(_: &mut Delta, out: &mut Vec<u8>, v: &Vec<PyFrame>) {
        put_var(out, v.len() as u64);
        for f in v {
            [f.file, f.function, f.line]
                .iter()
                .for_each(|x| put_var(out, *x as u64));
        }
    }
    fn get(_: &mut Delta, b: &mut Body) -> Result<Vec<PyFrame>, DecodeError> {
        let n = b.v()? as usize;
        // Each frame takes at least three bytes: a corrupt count cannot make the reader
        // reserve more than the body could hold.
        let mut frames = Vec::with_capacity(n.min(b.len() / 3));
        for _ in 0..n {
            frames.push(PyFrame {
                file: b.v()? as u32,
                function: b.v()? as u32,
                line: b.v()? as u32,
            });
        }
        Ok(frames)
    }
    fn value(v: &Vec<PyFrame>) -> Value<'_> {
        Value::Frames(v)
    }
}

/// `C`, for a field appended to a kind that older writers wrote without it.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Opt<C>(PhantomData<C>);
impl<T, C: Codec<T>> Codec<T> for Opt<C> {
    const OPTIONAL: bool = true;
    const TIME: bool = C::TIME;
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &T) {
        C::put(d, out, v)
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<T, DecodeError> {
        C::get(d, b)
    }
    fn value(v: &T) -> Value<'_> {
        C::value(v)
    }
    fn time(v: &T) -> Option<(bool, u64)> {
        C::time(v)
    }
}

/// `C`, for a field appended to a kind and written only where it is not its default
/// (nor any field after it): see the module's docs. Only for codecs without delta
/// state ([`Stateless`]): leaving a delta-coded field off would leave the reader's
/// deltas behind the writer's.
#[cfg_attr(not(test), allow(dead_code))]
pub struct Trail<C>(PhantomData<C>);
impl<T, C: Codec<T> + Stateless> Codec<T> for Trail<C> {
    const OPTIONAL: bool = true;
    const TRAILING: bool = true;
    const TIME: bool = C::TIME;
    #[inline(always)]
    fn put(d: &mut Delta, out: &mut Vec<u8>, v: &T) {
        C::put(d, out, v)
    }
    #[inline(always)]
    fn get(d: &mut Delta, b: &mut Body) -> Result<T, DecodeError> {
        C::get(d, b)
    }
    fn value(v: &T) -> Value<'_> {
        C::value(v)
    }
    fn time(v: &T) -> Option<(bool, u64)> {
        C::time(v)
    }
}

/// Codecs that read and write no delta state: a field of theirs may be left off.
pub trait Stateless {}
impl Stateless for V {}
impl Stateless for Sid {}
impl Stateless for U8 {}
impl Stateless for Zz {}
impl Stateless for Na {}
impl Stateless for Dev {}

/// Reads one field: an optional field absent from an older, shorter body takes its
/// default.
#[doc(hidden)]
#[inline(always)]
pub fn read<T, C: Codec<T>>(
    d: &mut Delta,
    b: &mut Body,
    default: impl FnOnce() -> T,
) -> Result<T, DecodeError> {
    if C::OPTIONAL && b.at_end() {
        return Ok(default());
    }
    C::get(d, b)
}

/// A field's default: the one the table gives, else the type's.
#[doc(hidden)]
#[macro_export]
macro_rules! __field_default {
    ($t:ty) => {
        <$t as ::core::default::Default>::default()
    };
    ($t:ty, $d:expr) => {
        $d
    };
}

/// The event table. Two lists, in tag order within each:
///
/// ```text
/// structs {                       // Event::Name(Name), with `pub struct Name`
///     /// docs
///     Name(TAG_NAME = 33, "name") {
///         /// docs
///         field: Type => Codec [= default],
///         ...
///     }
/// }
/// inline {                        // Event::Name { fields } (no struct of its own)
///     Name(TAG_NAME = 34, "name") { field: Type => Codec, ... }
/// }
/// ```
///
/// Each gives: `pub const TAG_NAME: u8`, the struct (`Clone, Debug, PartialEq, Eq`,
/// and `Default` from the fields' defaults) or variant, and arms of `Event::tag`,
/// `Event::name`, `Event::encode_body`, `Event::decode_body` and `Event::fields`.
/// Fields are written in the order listed: a new field goes last (`Opt<C>`).
#[macro_export]
macro_rules! define_events {
    (
        structs { $(
            $(#[$sm:meta])*
            $S:ident($STAG:ident = $stag:literal, $sname:literal) { $(
                $(#[$fm:meta])*
                $f:ident : $ft:ty => $fc:ty $(= $fd:expr)?
            ),* $(,)? }
        )* }
        inline { $(
            $(#[$im:meta])*
            $I:ident($ITAG:ident = $itag:literal, $iname:literal) { $(
                $g:ident : $gt:ty => $gc:ty
            ),* $(,)? }
        )* }
    ) => {
        $(
            pub const $STAG: u8 = $stag;
            $(#[$sm])*
            #[derive(Clone, Debug, PartialEq, Eq)]
            pub struct $S { $( $(#[$fm])* pub $f: $ft, )* }
            impl ::core::default::Default for $S {
                fn default() -> $S {
                    $S { $( $f: $crate::__field_default!($ft $(, $fd)?), )* }
                }
            }
            impl $S {
                /// The kind's tag.
                pub const TAG: u8 = $stag;
                /// The kind's name.
                pub const NAME: &'static str = $sname;
            }
            impl $crate::Fields for $S {
                fn kind_name(&self) -> &'static str {
                    $sname
                }
                #[inline(always)]
                fn span(&self) -> Option<(u64, Option<u64>)> {
                    use $crate::table::Codec;
                    let mut s = $crate::table::Span::default();
                    $( if <$fc as Codec<$ft>>::TIME {
                        s.add(<$fc as Codec<$ft>>::time(&self.$f));
                    } )*
                    s.get()
                }
                fn fields(&self, f: &mut dyn FnMut(&'static str, $crate::Value<'_>)) {
                    use $crate::table::Codec;
                    $( f(stringify!($f), <$fc as Codec<$ft>>::value(&self.$f)); )*
                }
            }
        )*
        $( pub const $ITAG: u8 = $itag; )*

        /// One trace event. Tags (the `TAG_*` constants) are append-only.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Event {
            $( $(#[$im])* $I { $( $g: $gt ),* }, )*
            $( $S($S), )*
        }

        impl Event {
            /// The event's tag (kernels: [`TAG_KERNEL`], the self-contained form).
            pub fn tag(&self) -> u8 {
                match self {
                    $( Event::$I { .. } => $ITAG, )*
                    $( Event::$S(_) => $STAG, )*
                }
            }

            /// The kind's name (`kernel`, `host_copy`, ...), as `gputrace dump` types
            /// its lines.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Event::$I { .. } => $iname, )*
                    $( Event::$S(_) => $sname, )*
                }
            }

            /// The name of the kind a tag stands for (`None` for a tag not in the table).
            pub fn tag_name(tag: u8) -> Option<&'static str> {
                match tag {
                    $( $ITAG => Some($iname), )*
                    $( $STAG => Some($sname), )*
                    _ => None,
                }
            }

            /// Writes the event's body (its fields, in order) and returns its tag.
            #[doc(hidden)]
            pub fn encode_body(&self, d: &mut $crate::Delta, out: &mut Vec<u8>) -> u8 {
                use $crate::table::Codec;
                match self {
                    $( Event::$I { $( $g ),* } => {
                        $( <$gc as Codec<$gt>>::put(d, out, $g); )*
                        $ITAG
                    } )*
                    $( Event::$S(x) => {
                        // The body's length after its last field that must be written:
                        // trailing fields at their defaults are cut off (`Trail`).
                        #[allow(unused_mut)]
                        let mut keep = out.len();
                        $(
                            <$fc as Codec<$ft>>::put(d, out, &x.$f);
                            if !<$fc as Codec<$ft>>::TRAILING
                                || x.$f != $crate::__field_default!($ft $(, $fd)?)
                            {
                                keep = out.len();
                            }
                        )*
                        out.truncate(keep);
                        $STAG
                    } )*
                }
            }

            /// Reads the body of an event of `tag` (`None`: a tag not in the table).
            #[doc(hidden)]
            pub fn decode_body(
                tag: u8,
                d: &mut $crate::Delta,
                b: &mut $crate::Body,
            ) -> Result<Option<Event>, $crate::DecodeError> {
                use $crate::table::read;
                Ok(Some(match tag {
                    $( $ITAG => Event::$I { $(
                        $g: read::<$gt, $gc>(d, b, || $crate::__field_default!($gt))?,
                    )* }, )*
                    $( $STAG => Event::$S($S { $(
                        $f: read::<$ft, $fc>(d, b, || $crate::__field_default!($ft $(, $fd)?))?,
                    )* }), )*
                    _ => return Ok(None),
                }))
            }

            /// The event's first timestamp field and, for a span, its end (`None`:
            /// a kind without a timestamp field).
            pub fn span(&self) -> Option<(u64, Option<u64>)> {
                match self {
                    $( Event::$I { $( $g ),* } => {
                        let mut s = $crate::table::Span::default();
                        $( if <$gc as $crate::table::Codec<$gt>>::TIME {
                            s.add(<$gc as $crate::table::Codec<$gt>>::time($g));
                        } )*
                        s.get()
                    } )*
                    $( Event::$S(x) => $crate::Fields::span(x), )*
                }
            }

            /// Calls `f` with the name and value of each field, in wire order.
            pub fn fields(&self, f: &mut dyn FnMut(&'static str, $crate::Value<'_>)) {
                match self {
                    $( Event::$I { $( $g ),* } => {
                        $( f(stringify!($g), <$gc as $crate::table::Codec<$gt>>::value($g)); )*
                    } )*
                    $( Event::$S(x) => $crate::Fields::fields(x, f), )*
                }
            }
        }

        impl $crate::Fields for Event {
            fn kind_name(&self) -> &'static str {
                self.name()
            }
            fn span(&self) -> Option<(u64, Option<u64>)> {
                Event::span(self)
            }
            fn fields(&self, f: &mut dyn FnMut(&'static str, $crate::Value<'_>)) {
                Event::fields(self, f)
            }
        }
    };
}

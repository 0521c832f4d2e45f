//! The value types a tensor can hold.

use std::fmt::{Debug, Display, LowerExp};
use std::ops::{Add, AddAssign, Mul, Neg, Sub};

/// A scalar a [`Tensor`](crate::Tensor) stores: `f32` or `f64`.
///
/// Kept deliberately small: what storage, conversion, pruning and file I/O need, nothing that
/// belongs to a linear-algebra crate.
pub trait Value:
    Copy
    + Default
    + PartialEq
    + PartialOrd
    + Debug
    + Display
    + LowerExp
    + Add<Output = Self>
    + AddAssign
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + Send
    + Sync
    + 'static
{
    /// The additive identity; also the value of every component that is not stored.
    const ZERO: Self;
    /// The multiplicative identity; the value of a `pattern` Matrix Market entry.
    const ONE: Self;
    /// The largest finite value.
    const MAX: Self;
    /// Bits of the significand: every integer up to `2^MANTISSA_DIGITS` is exact.
    const MANTISSA_DIGITS: u32;
    /// A short name used in messages and file headers (`"f32"`, `"f64"`).
    const NAME: &'static str;

    /// Magnitude, used by pruning.
    fn abs(self) -> Self;
    /// Conversion from `f64` (rounding for `f32`).
    fn from_f64(v: f64) -> Self;
    /// Widening conversion to `f64`.
    fn to_f64(self) -> f64;
    /// Parses a decimal or scientific literal (`1`, `-2.5e-3`, `inf`, `nan`).
    fn parse_text(text: &str) -> Option<Self>;
    /// The same from bytes, with the Eisel–Lemire fast path of `fast-float2` (the file
    /// readers' hot loop).
    fn parse_bytes(bytes: &[u8]) -> Option<Self>;
}

macro_rules! impl_value {
    ($t:ty, $name:literal) => {
        impl Value for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const MAX: Self = <$t>::MAX;
            const MANTISSA_DIGITS: u32 = <$t>::MANTISSA_DIGITS;
            const NAME: &'static str = $name;

            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn parse_text(text: &str) -> Option<Self> {
                text.parse::<$t>().ok()
            }
            #[inline]
            fn parse_bytes(bytes: &[u8]) -> Option<Self> {
                fast_float2::parse::<$t, _>(bytes).ok()
            }
        }
    };
}

impl_value!(f32, "f32");
impl_value!(f64, "f64");

#[cfg(test)]
mod tests {
    use super::Value;

    #[test]
    fn byte_and_text_parsing_agree() {
        for text in [
            "1",
            "-2.5e-3",
            "+7",
            ".5",
            "5.",
            "1E8",
            "2.855598749195E8",
            "inf",
            "-infinity",
            "NaN",
            "1e-400",
            "1e400",
            "0x10",
            "1_0",
            "",
            "-",
            "e5",
            "1.2.3",
            "--1",
            "1e",
            "1.5x",
            " 1",
            "\u{e9}",
        ] {
            let a = <f64 as Value>::parse_text(text);
            let b = <f64 as Value>::parse_bytes(text.as_bytes());
            assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "{text:?}");
            let a = <f32 as Value>::parse_text(text);
            let b = <f32 as Value>::parse_bytes(text.as_bytes());
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits), "{text:?}");
        }
    }
}

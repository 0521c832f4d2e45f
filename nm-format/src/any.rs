//! `AnyTensor`: a tensor whose value type is known only at run time.

use crate::tensor::Tensor;

/// A tensor of `f32` or `f64` values, for callers that learn the value type at run time (the C
/// and Python bindings); [`with_tensor!`](crate::with_tensor) runs code on either.
#[derive(Clone, Debug, PartialEq)]
pub enum AnyTensor {
    /// `f32` values.
    F32(Tensor<f32>),
    /// `f64` values.
    F64(Tensor<f64>),
}

impl AnyTensor {
    /// Whether the values are `f32`.
    pub fn is_f32(&self) -> bool {
        matches!(self, AnyTensor::F32(_))
    }
}

impl From<Tensor<f32>> for AnyTensor {
    fn from(t: Tensor<f32>) -> Self {
        AnyTensor::F32(t)
    }
}

impl From<Tensor<f64>> for AnyTensor {
    fn from(t: Tensor<f64>) -> Self {
        AnyTensor::F64(t)
    }
}

/// Runs `$body` with `$t` bound to the typed tensor inside an [`AnyTensor`] (or a reference to
/// one), the same code for either value type.
#[macro_export]
macro_rules! with_tensor {
    ($any:expr, $t:ident => $body:expr) => {
        match $any {
            $crate::AnyTensor::F32($t) => $body,
            $crate::AnyTensor::F64($t) => $body,
        }
    };
}

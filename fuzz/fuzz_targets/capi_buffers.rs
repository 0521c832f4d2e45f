//! The C API entry points that take buffers — tensors from COO, CSR, dense arrays and N:M
//! parts — with arbitrary contents and sizes (each buffer as long as its size argument says, as
//! the contract requires): never a crash or an unwinding panic, a status for every outcome, and
//! every tensor built reads back: its dense copy sums to what a built COO tensor was given.
#![no_main]

use std::ffi::CString;
use std::ptr;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nmsparse::{
    NMS_F64, nms_format, nms_format_free, nms_format_parse, nms_status, nms_tensor, nms_tensor_free,
    nms_tensor_from_coo, nms_tensor_from_csr, nms_tensor_from_dense, nms_tensor_from_nm_parts, nms_tensor_nnz,
    nms_tensor_to_dense,
};

#[derive(Arbitrary, Debug)]
enum Call {
    Coo { shape: Vec<u8>, coords: Vec<u8>, values: Vec<i8>, format: u8, sum: bool },
    Csr { rows: u8, cols: u8, indptr: Vec<u8>, indices: Vec<u8>, values: Vec<i8> },
    Dense { shape: Vec<u8>, data: Vec<i8>, format: u8 },
    NmParts { k: u8, n: u8, keep: u8, window: u8, l: u8, b_prime: Vec<i8>, d: Vec<u16> },
}

const FORMATS: [&str; 6] = ["dense", "csr", "coo", "csf", "dcsr", "nv24"];

fn format(name: &str, order: usize) -> Option<*mut nms_format> {
    let text = CString::new(name).ok()?;
    let mut f = ptr::null_mut();
    // SAFETY: a NUL-terminated string and room for one pointer.
    (unsafe { nms_format_parse(text.as_ptr(), order, &mut f) } == nms_status::NMS_OK).then_some(f)
}

/// The dense copy of a tensor the API built (and frees it).
fn dense(t: *mut nms_tensor, len: usize) -> Vec<f64> {
    let mut nnz = 0usize;
    // SAFETY: `t` is a live tensor; room for one count.
    assert_eq!(unsafe { nms_tensor_nnz(t, &mut nnz) }, nms_status::NMS_OK);
    let mut out = vec![0.0f64; len];
    // SAFETY: `out` holds `len` doubles.
    let status = unsafe { nms_tensor_to_dense(t, NMS_F64, out.as_mut_ptr().cast(), len) };
    assert_eq!(status, nms_status::NMS_OK);
    // SAFETY: built by the API, freed once.
    unsafe { nms_tensor_free(t) };
    out
}

fuzz_target!(|call: Call| {
    let mut t: *mut nms_tensor = ptr::null_mut();
    match call {
        Call::Coo { shape, coords, values, format: f, sum } => {
            let shape: Vec<usize> = shape.iter().take(3).map(|&s| s as usize % 7).collect();
            let order = shape.len();
            let nnz = if order == 0 { 0 } else { (coords.len() / order).min(values.len()) };
            let coords: Vec<u64> = coords[..nnz * order].iter().map(|&c| c as u64 % 8).collect();
            let values: Vec<f64> = values[..nnz].iter().map(|&v| v as f64).collect();
            let Some(fmt) = format(FORMATS[f as usize % FORMATS.len()], order.max(1)) else { return };
            // SAFETY: every buffer as long as the sizes passed say.
            let status = unsafe {
                nms_tensor_from_coo(
                    NMS_F64,
                    order,
                    shape.as_ptr(),
                    nnz,
                    coords.as_ptr(),
                    values.as_ptr().cast(),
                    fmt,
                    sum as i32,
                    &mut t,
                )
            };
            // SAFETY: parsed above, freed once.
            unsafe { nms_format_free(fmt) };
            if status == nms_status::NMS_OK {
                let got = dense(t, shape.iter().product());
                // Whatever format took it (an N:M format only data that fits), the values add up.
                let total: f64 = values.iter().sum();
                assert_eq!(got.iter().sum::<f64>(), total);
            }
        }
        Call::Csr { rows, cols, indptr, indices, values } => {
            let (rows, cols) = (rows as usize % 9, cols as usize % 9);
            let mut indptr: Vec<u64> = indptr.iter().map(|&p| p as u64 % 12).collect();
            indptr.resize(rows + 1, 0);
            let nnz = indptr[rows] as usize;
            let mut indices: Vec<u64> = indices.iter().map(|&c| c as u64 % 10).collect();
            indices.resize(nnz, 0);
            let mut values: Vec<f64> = values.iter().map(|&v| v as f64).collect();
            values.resize(nnz, 1.0);
            // SAFETY: `indptr` has rows + 1 entries, `indices` and `values` indptr[rows].
            let status = unsafe {
                nms_tensor_from_csr(
                    NMS_F64,
                    rows,
                    cols,
                    indptr.as_ptr(),
                    indices.as_ptr(),
                    values.as_ptr().cast(),
                    &mut t,
                )
            };
            if status == nms_status::NMS_OK {
                let got = dense(t, rows * cols);
                assert_eq!(got.iter().sum::<f64>(), values.iter().sum::<f64>());
            }
        }
        Call::Dense { shape, data, format: f } => {
            let shape: Vec<usize> = shape.iter().take(3).map(|&s| s as usize % 7).collect();
            let len: usize = shape.iter().product();
            let mut data: Vec<f64> = data.iter().map(|&v| v as f64).collect();
            data.resize(len, 0.0);
            let Some(fmt) = format(FORMATS[f as usize % FORMATS.len()], shape.len().max(1)) else { return };
            // SAFETY: `shape` has its order, `data` the product of the shape.
            let status = unsafe {
                nms_tensor_from_dense(NMS_F64, shape.len(), shape.as_ptr(), data.as_ptr().cast(), fmt, &mut t)
            };
            // SAFETY: parsed above, freed once.
            unsafe { nms_format_free(fmt) };
            if status == nms_status::NMS_OK {
                assert_eq!(dense(t, len), data);
            }
        }
        Call::NmParts { k, n, keep, window, l, b_prime, d } => {
            let (k, n, keep, window, l) =
                (k as usize % 17, n as usize % 17, keep as u32 % 9, window as u32 % 9, l as usize % 5);
            // The sizes the contract asks for (when the pattern is valid; else any).
            let (rows, groups) =
                if window > 0 && l > 0 { (k.div_ceil(window as usize) * keep as usize, n.div_ceil(l)) } else { (0, 0) };
            let mut b: Vec<f64> = b_prime.iter().map(|&v| v as f64).collect();
            b.resize(rows * groups * l.max(1), 0.0);
            let mut d = d;
            d.resize(rows * groups, 0);
            // SAFETY: `b_prime` and `d` as long as the pattern's sizes.
            let status = unsafe {
                nms_tensor_from_nm_parts(NMS_F64, k, n, keep, window, l, b.as_ptr().cast(), d.as_ptr(), &mut t)
            };
            if status == nms_status::NMS_OK {
                dense(t, k * n);
            }
        }
    }
});

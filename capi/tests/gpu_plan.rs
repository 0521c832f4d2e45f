//! A CUDA plan through the C ABI with device memory, as a C caller holds it: `cudaMalloc`ed
//! operands and a stream of the caller's, each run equal to the CPU plan's; host pointers
//! passed as device memory and allocations too short are refused. Without a device the test
//! prints why it is skipped (the C test `plans.c` covers the rest on every machine).

use std::ffi::c_void;
use std::ptr::null_mut;

use cudarc::driver::{CudaContext, DevicePtr};
use nmsparse::{
    NMS_DEVICE_CPU, NMS_DEVICE_CUDA, NMS_F32, NMS_MEMORY_DEVICE, NMS_MEMORY_HOST, nms_format_free, nms_format_parse,
    nms_last_error, nms_nm_plan, nms_nm_plan_create, nms_nm_plan_free, nms_nm_plan_run, nms_status, nms_tensor,
    nms_tensor_free, nms_tensor_from_dense,
};

fn ok(status: nms_status) {
    // SAFETY: the library's message, valid until this thread's next failing call.
    let message = unsafe { std::ffi::CStr::from_ptr(nms_last_error()) }.to_string_lossy().into_owned();
    assert_eq!(status, nms_status::NMS_OK, "{message}");
}

fn refused(status: nms_status, needle: &str) {
    // SAFETY: as in `ok`.
    let message = unsafe { std::ffi::CStr::from_ptr(nms_last_error()) }.to_string_lossy().into_owned();
    assert!(status == nms_status::NMS_ERR_UNSUPPORTED && message.contains(needle), "{status:?}: {message}");
}

/// A `rows×cols` f32 tensor in `format` from `values`.
fn tensor(format: &str, [rows, cols]: [usize; 2], values: &[f32]) -> *mut nms_tensor {
    let (mut f, mut t) = (null_mut(), null_mut());
    let text = std::ffi::CString::new(format).unwrap();
    // SAFETY: a NUL-terminated string, live arrays of the stated sizes, out-parameters.
    unsafe {
        ok(nms_format_parse(text.as_ptr(), 2, &mut f));
        ok(nms_tensor_from_dense(NMS_F32, 2, [rows, cols].as_ptr(), values.as_ptr().cast(), f, &mut t));
        nms_format_free(f);
    }
    t
}

fn plan(sparse: *const nms_tensor, dense_dim: usize, device: i32) -> *mut nms_nm_plan {
    let mut plan = null_mut();
    // SAFETY: a live tensor and an out-parameter.
    ok(unsafe { nms_nm_plan_create(sparse, dense_dim, 1, device, &mut plan) });
    plan
}

#[test]
fn cuda_plans_run_on_device_memory_and_caller_streams() {
    if let Some(why) = nms::cuda::unavailable() {
        println!("skipped: no CUDA device ({why})");
        return;
    }
    let ctx = CudaContext::new(0).unwrap();
    let (m, k, n) = (70, 96, 50);
    // B in nm(2,4,8) and A in nv24 with small integers (exact sums), dense operands likewise.
    let b: Vec<f32> =
        (0..k * n).map(|i| if ((i / n) + (i % n) / 8) % 4 < 2 { ((i * 5) % 7) as f32 - 3.0 } else { 0.0 }).collect();
    let a24: Vec<f32> =
        (0..m * k).map(|i| if (i + i / k) % 4 < 2 { ((i * 3) % 5) as f32 - 2.0 } else { 0.0 }).collect();
    let cases = [(tensor("nm(2,4,8)", [k, n], &b), m, m * k), (tensor("nv24", [m, k], &a24), n, k * n)];
    for (sparse, dense_dim, dense_len) in cases {
        let (cpu, gpu) = (plan(sparse, dense_dim, NMS_DEVICE_CPU), plan(sparse, dense_dim, NMS_DEVICE_CUDA));
        let dense: Vec<f32> = (0..dense_len).map(|i| ((i * 7) % 9) as f32 - 4.0).collect();
        let mut want = vec![0f32; m * n];
        // SAFETY: host arrays of the plan's sizes.
        ok(unsafe {
            nms_nm_plan_run(cpu, dense.as_ptr().cast(), want.as_mut_ptr().cast(), NMS_MEMORY_HOST, null_mut())
        });
        let stream = ctx.new_stream().unwrap();
        let dense_dev = stream.clone_htod(&dense).unwrap();
        let mut c_dev = stream.alloc_zeros::<f32>(m * n).unwrap();
        stream.synchronize().unwrap();
        let address = |s: &cudarc::driver::CudaSlice<f32>| s.device_ptr(&stream).0;
        let (x, c) = (address(&dense_dev), address(&c_dev));
        for on in [null_mut(), stream.cu_stream() as *mut c_void] {
            // SAFETY: device allocations of the plan's sizes on the plan's device; the stream
            // (or NULL) is live; the result is read after the stream is synchronized.
            ok(unsafe { nms_nm_plan_run(gpu, x as *const c_void, c as *mut c_void, NMS_MEMORY_DEVICE, on) });
            ctx.synchronize().unwrap();
            let got = stream.clone_dtoh(&c_dev).unwrap();
            assert!(got == want, "device run on stream {on:p}: results differ");
            stream.memset_zeros(&mut c_dev).unwrap();
        }
        let mut got = vec![f32::NAN; m * n];
        // SAFETY: host arrays of the plan's sizes.
        ok(unsafe {
            nms_nm_plan_run(gpu, dense.as_ptr().cast(), got.as_mut_ptr().cast(), NMS_MEMORY_HOST, null_mut())
        });
        assert!(got == want, "host run: results differ");
        // SAFETY: the driver is asked about each address before anything touches it.
        unsafe {
            let host = dense.as_ptr() as *const c_void;
            refused(nms_nm_plan_run(gpu, host, c as *mut c_void, NMS_MEMORY_DEVICE, null_mut()), "not device memory");
            // The last 16 bytes of a 4 MiB cuMemAlloc allocation (a multiple of any granularity,
            // so the driver's end is this one) cannot hold C.
            ctx.bind_to_thread().unwrap();
            let bytes = 4 << 20;
            let base = cudarc::driver::result::malloc_sync(bytes).unwrap();
            let tail = (base + bytes as u64 - 16) as *mut c_void;
            refused(nms_nm_plan_run(gpu, x as *const c_void, tail, NMS_MEMORY_DEVICE, null_mut()), "past the end");
            cudarc::driver::result::free_sync(base).unwrap();
            nms_nm_plan_free(cpu);
            nms_nm_plan_free(gpu);
            nms_tensor_free(sparse);
        }
    }
    println!("CUDA plans through the C ABI: device memory, caller streams and refusals checked");
}

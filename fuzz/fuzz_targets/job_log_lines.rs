//! The job-output classifier (NCCL, PyTorch, torchrun, CUDA lines) and torchrun's error file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        let _ = gsched_launch::watch::classify_line(line);
    }
    let _ = gsched_launch::watch::parse_error_file(&text);
});

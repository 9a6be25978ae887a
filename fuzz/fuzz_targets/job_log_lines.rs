//! The job-output classifier (NCCL, PyTorch, torchrun, CUDA lines), first-cause evidence,
//! NCCL's transport lines and torchrun's error file.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut transport = gsched_launch::transport::TransportLog::default();
    let mut seen = Vec::new();
    for line in text.lines() {
        transport.line(line);
        if let Some(f) = gsched_launch::watch::classify_line(line) {
            if f.fatal {
                let _ = gsched_launch::watch::first_cause(&seen, &f);
            }
            seen.push(f);
        }
    }
    let _ = transport.judge(None);
    let node = gsched_launch::transport::NodeNet {
        rdma: vec!["mlx5_0".into()],
        ipoib: vec!["ib0".into()],
    };
    let _ = transport.judge(Some(&node));
    let _ = gsched_launch::watch::parse_error_file(&text);
});

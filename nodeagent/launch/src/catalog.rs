//! The vocabularies a job's output is read with, as data (`nodeagent/launch/catalog/`,
//! each file naming its source): CUDA's error codes with what each says of the GPU,
//! PyTorch's rendezvous and c10d store failures, RDMA work-completion statuses and queue
//! pair states, the verbs calls that make RDMA resources, and the signals crash handlers
//! report. A line is read by the table's names and messages, whichever tool printed them,
//! not by one report's wording.

use std::sync::OnceLock;

fn rows(csv: &'static str) -> impl Iterator<Item = Vec<&'static str>> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(',').map(str::trim).collect())
}

/// What a CUDA error says of the GPU (the table's reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CudaReading {
    /// The GPU or its driver is in a state no program fixes: the job fails and the GPU
    /// is withheld until it is reset or fixed.
    Device,
    /// The GPU or the program: the job fails; the probe decides between jobs.
    Probe,
    /// The program's own error: the job fails, the GPU is fine.
    Program,
}

/// One CUDA error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError {
    /// `cudaErrorECCUncorrectable`.
    pub name: &'static str,
    pub code: u32,
    /// `CUDA_ERROR_ECC_UNCORRECTABLE`, empty where the driver API has none.
    pub driver_name: &'static str,
    /// What `cudaGetErrorString` says.
    pub message: &'static str,
    pub reading: CudaReading,
}

impl CudaError {
    /// The finding kind of the GPU's state where the reading is `Device`: the memory
    /// (`ecc-*`), an NVLink, the driver, or the GPU itself.
    pub fn state_kind(&self) -> &'static str {
        match self.name {
            "cudaErrorECCUncorrectable" => "ecc-uncorrectable",
            "cudaErrorNvlinkUncorrectable" => "nvlink-uncorrectable",
            "cudaErrorSystemDriverMismatch" => "driver-mismatch",
            "cudaErrorSystemNotReady" => "driver-system-not-ready",
            "cudaErrorDeviceNotLicensed" => "gpu-not-licensed",
            _ => "gpu-unavailable",
        }
    }
}

/// Every CUDA error (runtime names, their driver API names and messages).
pub fn cuda_errors() -> &'static [CudaError] {
    static TABLE: OnceLock<Vec<CudaError>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(include_str!("../catalog/cuda_errors.csv"))
            .filter_map(|c| {
                let [name, code, driver_name, message, reading] = c.as_slice() else {
                    return None;
                };
                Some(CudaError {
                    name,
                    code: code.parse().ok()?,
                    driver_name,
                    message,
                    reading: match *reading {
                        "device" => CudaReading::Device,
                        "probe" => CudaReading::Probe,
                        "program" => CudaReading::Program,
                        _ => return None,
                    },
                })
            })
            .collect()
    })
}

/// Words that say a line reports a CUDA call's failure (PyTorch's "CUDA error:", NCCL's
/// and nccl-tests' "CUDA failure", the C++ API's "cuda runtime error", a status name), in
/// any case ("Cuda error:" of older samples and programs).
const CUDA_ANCHORS: [&str; 6] = [
    "cuda error",
    "cuda failure",
    "cuda runtime error",
    "cuda driver error",
    "cudaerror",
    "cuda_error_",
];

/// The CUDA error a line reports, by its name (runtime or driver API) or its message:
/// any message after one of the anchors, or a message of four words or more on a line
/// that speaks of CUDA.
pub fn cuda_error_in(line: &str) -> Option<&'static CudaError> {
    let table = cuda_errors();
    if let Some(e) = table.iter().find(|e| {
        contains_word(line, e.name)
            || (!e.driver_name.is_empty() && contains_word(line, e.driver_name))
    }) {
        return Some(e);
    }
    let lower = line.to_ascii_lowercase();
    let anchored = CUDA_ANCHORS.iter().any(|a| lower.contains(a));
    if !lower.contains("cuda") {
        return None;
    }
    table
        .iter()
        .filter(|e| anchored || e.message.split_whitespace().count() >= 4)
        .filter(|e| lower.contains(&e.message.to_ascii_lowercase()))
        // The longest message that fits ("unspecified launch failure in prior launch"
        // over "unspecified launch failure").
        .max_by_key(|e| e.message.len())
}

fn contains_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let after = line[at + word.len()..].chars().next();
        after.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// One of PyTorch's rendezvous and c10d store failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RendezvousError {
    /// The exception class or the socket message.
    pub what: &'static str,
    /// The finding kind (`rendezvous-timeout`...).
    pub kind: &'static str,
    /// A message PyTorch recovers from by itself (a server socket falling back to a client,
    /// a client retrying its connection): evidence, never fatal alone.
    pub retried: bool,
}

/// PyTorch's rendezvous and c10d store failures, from `catalog/rendezvous.csv`.
pub fn rendezvous_errors() -> &'static [RendezvousError] {
    static TABLE: OnceLock<Vec<RendezvousError>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(include_str!("../catalog/rendezvous.csv"))
            .filter_map(|c| match c.as_slice() {
                [what, kind] => Some(RendezvousError {
                    what,
                    kind,
                    retried: false,
                }),
                [what, kind, "retried"] => Some(RendezvousError {
                    what,
                    kind,
                    retried: true,
                }),
                _ => None,
            })
            .collect()
    })
}

/// The rendezvous failure a line names (the most specific: a subclass before its base).
pub fn rendezvous_error_in(line: &str) -> Option<&'static RendezvousError> {
    rendezvous_errors()
        .iter()
        .find(|e| contains_word(line, e.what) || (e.what.contains(' ') && line.contains(e.what)))
}

/// The PyTorch modules of the rendezvous and its c10d store (pytorch/pytorch:
/// torch/distributed/elastic/rendezvous/, torch/distributed/rendezvous.py, the elastic
/// agent's store helpers in torch/distributed/elastic/utils/store.py): an exception raised
/// in them, whatever its class or words ("RuntimeError: Connection reset by peer" from
/// `_call_store`), is the job's processes failing to meet. Written as the last parts of
/// the path, which is what evidence keeps of a long one (`…/elastic/rendezvous/x.py`).
const RENDEZVOUS_MODULES: [&str; 3] = [
    "elastic/rendezvous/",
    "torch/distributed/rendezvous.py",
    "elastic/utils/store.py",
];

/// Whether `path` (a traceback frame's file, or evidence naming it) is in PyTorch's
/// rendezvous or c10d store code.
pub fn in_rendezvous_module(path: &str) -> bool {
    RENDEZVOUS_MODULES.iter().any(|m| path.contains(m))
}

/// One RDMA work completion status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WcStatus {
    /// `IBV_WC_RETRY_EXC_ERR`.
    pub name: &'static str,
    pub value: u32,
    /// `ibv_wc_status_str`'s words.
    pub text: &'static str,
    /// UCX's words for the same mlx5 syndrome, or empty.
    pub ucx: &'static str,
}

impl WcStatus {
    /// `ib-wc-retry-exc-err`.
    pub fn kind(&self) -> String {
        format!(
            "ib-wc-{}",
            self.name
                .trim_start_matches("IBV_WC_")
                .to_ascii_lowercase()
                .replace('_', "-")
        )
    }
}

pub fn wc_statuses() -> &'static [WcStatus] {
    static TABLE: OnceLock<Vec<WcStatus>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(include_str!("../catalog/wc_status.csv"))
            .filter_map(|c| {
                let [name, value, text, ucx] = c.as_slice() else {
                    return None;
                };
                Some(WcStatus {
                    name,
                    value: value.parse().ok()?,
                    text,
                    ucx,
                })
            })
            .collect()
    })
}

/// The failed work completion a line reports: by its name, by its `ibv_wc_status_str`
/// or UCX words, or by its number on a line that reports a work completion ("Completion
/// with error", perftest's "Failed status N: wr_id"). Success is not a failure.
pub fn wc_status_in(line: &str) -> Option<&'static WcStatus> {
    let lower = line.to_ascii_lowercase();
    let table = wc_statuses();
    let failed = table.iter().skip(1);
    if let Some(s) = failed.clone().find(|s| {
        contains_word(line, s.name)
            || (s.text.split_whitespace().count() >= 3
                && lower.contains(&s.text.to_ascii_lowercase()))
            || (!s.ucx.is_empty()
                && s.ucx.split_whitespace().count() >= 3
                && lower.contains(&s.ucx.to_ascii_lowercase()))
    }) {
        return Some(s);
    }
    // A completion reported with its status number: perftest's "wr_id", "Completion with
    // error", a network plugin's "Got completion ... status=12 ... vendor err 129".
    let completion = lower.contains("wr_id")
        || lower.contains("completion with error")
        || (lower.contains("completion") && lower.contains("vendor err"));
    if !completion {
        return None;
    }
    let pos = lower.find("status")?;
    let number: String = lower[pos + 6..]
        .trim_start_matches([' ', '=', ':'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let value: u32 = number.parse().ok()?;
    failed.clone().find(|s| s.value == value)
}

/// The queue pair states of `enum ibv_qp_state` (rdma-core libibverbs/verbs.h): a failure
/// to move a QP into one of them is a failed connection set-up to a peer.
pub const QP_STATES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];

/// A failed queue pair transition ("Failed to modify QP to RTR", "ibv_modify_qp failed"),
/// with the state it was moving to when the line says.
pub fn qp_transition_failed(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    let modify = lower.contains("modify qp")
        || lower.contains("ibv_modify_qp")
        || lower.contains("modify_qp");
    let failed = lower.contains("fail") || lower.contains("timed out") || lower.contains("error");
    if !(modify && failed) {
        return None;
    }
    let state = QP_STATES.iter().find(|s| {
        line.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == **s)
    });
    Some(state.copied().unwrap_or(""))
}

/// An RDMA verbs call that failed: which call, the resource it was making, and the
/// errno text the line gives ("Cannot allocate memory"), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsFailure {
    /// `ibv_create_cq`.
    pub call: &'static str,
    /// `completion queue`.
    pub resource: &'static str,
    pub errno: Option<Errno>,
}

impl VerbsFailure {
    /// `ib-verbs-create-cq`, `ib-verbs-devx-obj-create`.
    pub fn kind(&self) -> String {
        let call = self
            .call
            .trim_start_matches("ibv_")
            .trim_start_matches("mlx5dv_");
        format!("ib-verbs-{}", call.replace('_', "-"))
    }
}

/// The errno values a failed verbs call reports that say different things to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errno {
    /// ENOMEM: the locked-memory limit or the device's own resource limits.
    NoMemory,
    /// EACCES/EPERM: the device files or the cgroup's device filter.
    Denied,
    /// ENODEV/ENXIO: the device is gone.
    NoDevice,
    /// EINVAL and the rest: the caller's arguments or versions.
    Other,
}

impl Errno {
    fn in_line(line: &str) -> Option<Errno> {
        let lower = line.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
        if has(&[
            "cannot allocate memory",
            "enomem",
            "errno 12",
            "errno: 12",
            "errno=12",
        ]) {
            Some(Errno::NoMemory)
        } else if has(&[
            "permission denied",
            "operation not permitted",
            "eacces",
            "eperm",
        ]) {
            Some(Errno::Denied)
        } else if has(&["no such device", "enodev", "enxio"]) {
            Some(Errno::NoDevice)
        } else if has(&["invalid argument", "not supported", "errno", "error"]) {
            Some(Errno::Other)
        } else {
            None
        }
    }
}

fn verbs_calls() -> &'static [(&'static str, &'static str)] {
    static TABLE: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(include_str!("../catalog/verbs_calls.csv"))
            .filter_map(|c| match c.as_slice() {
                [call, resource] => Some((*call, *resource)),
                _ => None,
            })
            .collect()
    })
}

/// The verbs call a line says failed ("ibv_create_cq(cqe=4096) failed: Cannot allocate
/// memory", "mlx5dv_devx_obj_create(QP) failed, syndrome 0", NCCL's "Call to ibv_reg_mr
/// failed"), by the names of `catalog/verbs_calls.csv`.
pub fn verbs_call_failed(line: &str) -> Option<VerbsFailure> {
    let lower = line.to_ascii_lowercase();
    if !(lower.contains("fail") || lower.contains("error") || lower.contains("returned")) {
        return None;
    }
    let (call, resource) = verbs_calls()
        .iter()
        .filter(|(call, _)| contains_word(line, call))
        .max_by_key(|(call, _)| call.len())?;
    Some(VerbsFailure {
        call,
        resource,
        errno: Errno::in_line(line),
    })
}

/// One signal: its number, name, `strsignal` text, and whether it is a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub number: i32,
    pub name: &'static str,
    pub text: &'static str,
    pub crash: bool,
}

pub fn signals() -> &'static [Signal] {
    static TABLE: OnceLock<Vec<Signal>> = OnceLock::new();
    TABLE.get_or_init(|| {
        rows(include_str!("../catalog/signals.csv"))
            .filter_map(|c| {
                let [number, name, text, reading] = c.as_slice() else {
                    return None;
                };
                Some(Signal {
                    number: number.parse().ok()?,
                    name,
                    text,
                    crash: *reading == "crash",
                })
            })
            .collect()
    })
}

/// The crash a signal handler's report names: Open MPI's "Signal: Segmentation fault
/// (11)", UCX's "Caught signal 7 (Bus error: ...)", glog's "*** SIGSEGV received",
/// Python's "Fatal Python error: Segmentation fault". Only crashes (a fault in the
/// process), not signals sent to stop it.
pub fn crash_signal_in(line: &str) -> Option<&'static Signal> {
    let t = line.trim();
    let table = signals();
    let by_number = |n: &str| -> Option<&'static Signal> {
        let n: i32 = n.trim().parse().ok()?;
        table.iter().find(|s| s.number == n)
    };
    let found = if let Some(pos) = t.find("Caught signal ") {
        by_number(t[pos + 14..].split_whitespace().next()?)
    } else if let Some(pos) = t.find("Signal: ") {
        let rest = &t[pos + 8..];
        let n = rest
            .rsplit_once('(')
            .map(|(_, n)| n.trim_end_matches(')'))?;
        by_number(n)
    } else if let Some(rest) = t.split("Fatal Python error: ").nth(1) {
        table.iter().find(|s| rest.starts_with(s.text))
    } else if t.contains("*** SIG") && t.contains("received") {
        table
            .iter()
            .find(|s| t.contains(&format!("*** {} ", s.name)))
    } else {
        None
    };
    found.filter(|s| s.crash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cuda_error_has_a_reading_and_is_found_by_its_message_and_names() {
        let rows = rows(include_str!("../catalog/cuda_errors.csv")).count();
        assert_eq!(cuda_errors().len(), rows, "a row did not parse");
        for e in cuda_errors() {
            assert!(e.name.starts_with("cudaError"), "{}", e.name);
            let by_name = cuda_error_in(&format!("failed with {}", e.name)).unwrap();
            assert_eq!(by_name.code, e.code, "{}", e.name);
            let said = format!("RuntimeError: CUDA error: {}", e.message);
            let found = cuda_error_in(&said).unwrap_or_else(|| panic!("{}", e.name));
            assert_eq!(found.code, e.code, "{said}: {}", found.name);
            if !e.driver_name.is_empty() {
                assert_eq!(cuda_error_in(e.driver_name).unwrap().code, e.code);
            }
        }
        let device: Vec<&str> = cuda_errors()
            .iter()
            .filter(|e| e.reading == CudaReading::Device)
            .map(|e| e.name)
            .collect();
        assert!(device.contains(&"cudaErrorECCUncorrectable"));
        assert!(device.contains(&"cudaErrorDevicesUnavailable"));
        assert_eq!(
            cuda_error_in(
                "Test CUDA failure common.cu:297 'an illegal memory access was encountered'"
            )
            .unwrap()
            .reading,
            CudaReading::Program
        );
        assert_eq!(
            cuda_error_in("RuntimeError: No CUDA GPUs are available")
                .unwrap()
                .code,
            100
        );
        assert_eq!(
            cuda_error_in("Cuda error: rp_many_kernel in file '' in line 111 : the launch timed out and was terminated.")
                .unwrap()
                .name,
            "cudaErrorLaunchTimeout"
        );
        // Short messages need a CUDA failure to be about.
        assert!(cuda_error_in("loading cuda kernels: unknown error in config").is_none());
        assert!(cuda_error_in("ValueError: invalid argument").is_none());
    }

    #[test]
    fn every_rendezvous_failure_is_named() {
        let kind = |line: &str| rendezvous_error_in(line).map(|e| e.kind);
        for e in rendezvous_errors() {
            assert!(e.kind.starts_with("rendezvous-"), "{}", e.what);
            assert_eq!(
                kind(&format!("x: {}: y", e.what)),
                Some(e.kind),
                "{}",
                e.what
            );
        }
        assert_eq!(
            kind(r#"    "message": "RendezvousTimeoutError: ","#),
            Some("rendezvous-timeout")
        );
        assert_eq!(
            kind(
                "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed."
            ),
            Some("rendezvous-connection")
        );
        assert_eq!(kind("rendezvous complete"), None);
        // Two agents on one host: the second's store cannot bind and becomes a client; a
        // client retries until the store is up. Neither is a failure on its own.
        for line in [
            "W20261206 08:37:42.216817  2067 socket.cpp:426] [c10d] The server socket has failed to bind to [::]:18399 (errno: 98 - Address already in use).",
            "E20261206 08:37:42.222675  2067 socket.cpp:462] [c10d] The server socket has failed to listen on any local network address.",
            "W1206 socket.cpp:697] [c10d] The client socket has failed to connect to [n1]:29500 (errno: 111 - Connection refused).",
        ] {
            assert!(
                rendezvous_error_in(line).is_some_and(|e| e.retried),
                "{line}"
            );
        }
        assert!(
            !rendezvous_error_in("RendezvousTimeoutError: x")
                .unwrap()
                .retried
        );
    }

    #[test]
    fn every_work_completion_status_is_read_by_name_words_or_number() {
        let rows = rows(include_str!("../catalog/wc_status.csv")).count();
        assert_eq!(wc_statuses().len(), rows);
        assert_eq!(rows, 22);
        for s in wc_statuses().iter().skip(1) {
            assert_eq!(wc_status_in(s.name).unwrap().value, s.value);
            let line = format!("Completion with error: status {} wr_id 7", s.value);
            assert_eq!(wc_status_in(&line).unwrap().name, s.name, "{line}");
        }
        assert!(wc_status_in("Completion with error: status 0").is_none());
        assert_eq!(
            wc_status_in("NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)")
                .unwrap()
                .name,
            "IBV_WC_RETRY_EXC_ERR"
        );
        assert_eq!(
            wc_status_in("UCX  ERROR Error on QP 0x61f5 wqe[0]: Transport retry count exceeded (synd 0x15 vend 0x81)")
                .unwrap()
                .kind(),
            "ib-wc-retry-exc-err"
        );
        assert_eq!(
            wc_status_in("  Failed status 4: wr_id 0 syndrom 0x51")
                .unwrap()
                .name,
            "IBV_WC_LOC_PROT_ERR"
        );
        assert_eq!(
            qp_transition_failed(
                "[Handshake] Failed to modify QP to RTR, check mtu, gid: Connection timed out [110]"
            ),
            Some("RTR")
        );
    }

    #[test]
    fn every_verbs_call_is_read_when_it_fails_with_what_its_errno_means() {
        let rows = rows(include_str!("../catalog/verbs_calls.csv")).count();
        assert_eq!(verbs_calls().len(), rows);
        for (call, resource) in verbs_calls() {
            let line = format!("UCX  ERROR {call}(x=1) failed: Cannot allocate memory");
            let f = verbs_call_failed(&line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!((f.call, f.resource), (*call, *resource));
            assert_eq!(f.errno, Some(Errno::NoMemory));
            assert!(f.kind().starts_with("ib-verbs-") && !f.kind().contains('_'));
            assert!(verbs_call_failed(&format!("calling {call} for rank 3")).is_none());
        }
        let f = verbs_call_failed("[0] ib_mlx5_dv.c:161  UCX  ERROR   mlx5dv_devx_obj_create(QP) failed, syndrome 0: Cannot allocate memory").unwrap();
        assert_eq!(f.kind(), "ib-verbs-devx-obj-create");
        let f = verbs_call_failed(
            "ib_iface.c:1035 UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory",
        )
        .unwrap();
        assert_eq!(
            (f.kind().as_str(), f.errno),
            ("ib-verbs-create-cq", Some(Errno::NoMemory))
        );
        // The longest name that fits: ibv_create_cq_ex is not ibv_create_cq.
        assert_eq!(
            verbs_call_failed("ibv_create_cq_ex failed: Permission denied")
                .unwrap()
                .call,
            "ibv_create_cq_ex"
        );
        assert_eq!(
            verbs_call_failed("NET/IB : Call to ibv_reg_mr failed with error No such device")
                .unwrap()
                .errno,
            Some(Errno::NoDevice)
        );
    }

    #[test]
    fn every_signal_has_a_reading_and_crash_reports_are_read() {
        for s in signals() {
            assert!(s.name.starts_with("SIG"));
            let ompi = format!("[host:01] Signal: {} ({})", s.text, s.number);
            assert_eq!(
                crash_signal_in(&ompi).map(|c| c.number),
                s.crash.then_some(s.number)
            );
        }
        assert_eq!(
            crash_signal_in("[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)")
                .unwrap()
                .name,
            "SIGBUS"
        );
        assert_eq!(
            crash_signal_in("Fatal Python error: Segmentation fault")
                .unwrap()
                .number,
            11
        );
        assert!(crash_signal_in("Signal: Terminated (15)").is_none());
    }
}

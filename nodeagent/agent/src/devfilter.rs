//! The cgroup v2 GPU device filter: a `BPF_PROG_TYPE_CGROUP_DEVICE` program attached to
//! a step's cgroup that refuses every NVIDIA GPU device (major 195) except the step's own
//! GPUs and the control nodes every CUDA process needs (`nvidiactl` 195:255,
//! `nvidia-modeset` 195:254). Other devices (`nvidia-uvm`, `/dev/null`, terminals...) are
//! untouched. This is what Slurm's cgroup/v2 plugin and systemd's `DeviceAllow=` do; the
//! program is a handful of instructions, assembled here and loaded with `bpf(2)`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The NVIDIA character-device major (`/dev/nvidia*`).
pub const NVIDIA_MAJOR: u32 = 195;
/// `/dev/nvidiactl` and `/dev/nvidia-modeset`, which every CUDA process opens.
const CONTROL_MINORS: [u32; 2] = [255, 254];

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u8,
    /// dst register in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

/// `r_dst = *(u32 *)(r_src + off)`
fn load_word(dst: u8, src: u8, off: i16) -> Insn {
    Insn {
        code: 0x61,
        regs: dst | (src << 4),
        off,
        imm: 0,
    }
}

/// `if r_dst == imm goto +off`
fn jump_eq(dst: u8, imm: u32, off: i16) -> Insn {
    Insn {
        code: 0x15,
        regs: dst,
        off,
        imm: imm as i32,
    }
}

/// `if r_dst != imm goto +off`
fn jump_ne(dst: u8, imm: u32, off: i16) -> Insn {
    Insn {
        code: 0x55,
        regs: dst,
        off,
        imm: imm as i32,
    }
}

/// `r0 = imm; exit`
fn ret(value: i32) -> [Insn; 2] {
    [
        Insn {
            code: 0xb7,
            regs: 0,
            off: 0,
            imm: value,
        },
        Insn {
            code: 0x95,
            regs: 0,
            off: 0,
            imm: 0,
        },
    ]
}

/// The program: devices of a major in `deny_majors` are refused unless (major, minor) is
/// in `allow`; every other device is allowed.
fn program(deny_majors: &[u32], allow: &[(u32, u32)]) -> Vec<Insn> {
    // struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }
    let mut p = vec![load_word(2, 1, 4), load_word(3, 1, 8)];
    let n = deny_majors.len();
    for (i, m) in deny_majors.iter().enumerate() {
        // Past the remaining checks and the "allow" below, to the allow list.
        p.push(jump_eq(2, *m, (n - i - 1 + 2) as i16));
    }
    p.extend(ret(1));
    for (major, minor) in allow {
        p.push(jump_ne(2, *major, 3));
        p.push(jump_ne(3, *minor, 2));
        p.extend(ret(1));
    }
    p.extend(ret(0));
    p
}

fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a fully initialised `union bpf_attr` prefix of `attr.len()` bytes
    // for `cmd`; the kernel reads (and for some commands writes) only within it.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Why the GPU device filter could not be loaded or attached.
#[derive(Debug, thiserror::Error)]
pub enum DeviceFilterError {
    #[error("the kernel refused the BPF device program: {0}")]
    Load(std::io::Error),
    #[error("cannot open cgroup {path}: {source}")]
    OpenCgroup {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot attach the GPU device filter to {path}: {source}")]
    Attach {
        path: String,
        source: std::io::Error,
    },
}

/// Loads the program; returns its file descriptor.
fn load(insns: &[Insn]) -> Result<OwnedFd, DeviceFilterError> {
    let license = c"Apache-2.0";
    // The BPF_PROG_LOAD part of union bpf_attr, up to expected_attach_type.
    let mut attr = [0u8; 72];
    put_u32(&mut attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE);
    put_u32(&mut attr, 4, insns.len() as u32);
    put_u64(&mut attr, 8, insns.as_ptr() as u64);
    put_u64(&mut attr, 16, license.as_ptr() as u64);
    attr[48..48 + 14].copy_from_slice(b"gsched_gpu_dev");
    put_u32(&mut attr, 68, BPF_CGROUP_DEVICE);
    let fd = bpf(BPF_PROG_LOAD, &mut attr).map_err(DeviceFilterError::Load)?;
    // SAFETY: a successful BPF_PROG_LOAD returns a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether this kernel loads cgroup device programs (asked once at start-up, so the
/// agent can say what GPU privacy rests on).
pub fn probe() -> Result<(), DeviceFilterError> {
    load(&program(&[NVIDIA_MAJOR], &[])).map(drop)
}

/// The (major, minor) of a character device node, if `path` is one.
pub fn char_device(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    if !m.file_type().is_char_device() {
        return None;
    }
    let rdev = m.rdev();
    Some((
        nix::sys::stat::major(rdev) as u32,
        nix::sys::stat::minor(rdev) as u32,
    ))
}

/// Attaches a filter to `cgroup` that lets its processes open only `gpus` (device nodes)
/// among NVIDIA GPUs. GPU paths that are not character devices (fake topologies) are
/// skipped; with none left there is nothing to filter.
pub fn attach(cgroup: &Path, gpus: &[String]) -> Result<bool, DeviceFilterError> {
    let mut allow: Vec<(u32, u32)> = gpus
        .iter()
        .filter_map(|g| char_device(Path::new(g)))
        .collect();
    if allow.is_empty() {
        return Ok(false);
    }
    allow.extend(CONTROL_MINORS.iter().map(|m| (NVIDIA_MAJOR, *m)));
    let prog = load(&program(&[NVIDIA_MAJOR], &allow))?;
    let dir = std::fs::File::open(cgroup).map_err(|source| DeviceFilterError::OpenCgroup {
        path: cgroup.display().to_string(),
        source,
    })?;
    // The BPF_PROG_ATTACH part of union bpf_attr.
    let mut attr = [0u8; 20];
    put_u32(&mut attr, 0, dir.as_raw_fd() as u32);
    put_u32(&mut attr, 4, prog.as_raw_fd() as u32);
    put_u32(&mut attr, 8, BPF_CGROUP_DEVICE);
    put_u32(&mut attr, 12, BPF_F_ALLOW_MULTI);
    bpf(BPF_PROG_ATTACH, &mut attr).map_err(|source| DeviceFilterError::Attach {
        path: cgroup.display().to_string(),
        source,
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one device access, as the kernel would.
    fn run(p: &[Insn], major: u32, minor: u32) -> i32 {
        let (mut pc, mut r) = (0usize, [0u32; 11]);
        let ctx = [2u32, major, minor];
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                0x61 => {
                    assert_eq!(src, 1, "loads read the context");
                    r[dst] = ctx[i.off as usize / 4];
                }
                0x15 if r[dst] == i.imm as u32 => pc = (pc as i64 + i.off as i64) as usize,
                0x55 if r[dst] != i.imm as u32 => pc = (pc as i64 + i.off as i64) as usize,
                0x15 | 0x55 => {}
                0xb7 => r[dst] = i.imm as u32,
                0x95 => return r[0] as i32,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn only_the_steps_gpus_and_the_control_nodes_open() {
        let allow = [(195, 1), (195, 255), (195, 254)];
        let p = program(&[NVIDIA_MAJOR], &allow);
        assert_eq!(run(&p, 195, 1), 1, "its own GPU");
        assert_eq!(run(&p, 195, 0), 0, "another job's GPU");
        assert_eq!(run(&p, 195, 7), 0, "an idle GPU");
        assert_eq!(run(&p, 195, 255), 1, "nvidiactl");
        assert_eq!(run(&p, 195, 254), 1, "nvidia-modeset");
        assert_eq!(run(&p, 238, 0), 1, "nvidia-uvm");
        assert_eq!(run(&p, 1, 3), 1, "/dev/null");
        let none = program(&[NVIDIA_MAJOR, 240], &[]);
        assert_eq!(run(&none, 240, 1), 0);
        assert_eq!(run(&none, 195, 0), 0);
        assert_eq!(run(&none, 5, 0), 1);
    }
}

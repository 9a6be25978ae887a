//! `--cpu-freq`, `--gpu-freq` and `--mem-bind` read as Slurm 22.05.8 reads them
//! (`src/common/cpu_frequency.c: cpu_freq_verify_cmdline`, `src/common/tres_frequency.c:
//! _valid_gpu_freq`, `src/common/slurm_resource_info.c: slurm_verify_mem_bind`), with the
//! value Slurm hands the job (`SLURM_CPU_FREQ_REQ`, `SLURM_GPU_FREQ`, `SLURM_MEM_BIND`).
//! gsched checks and passes them on; it sets no clocks and no memory policy.

/// A `--cpu-freq`, `--gpu-freq` or `--mem-bind` value Slurm would refuse; the message is
/// Slurm's, with what the option takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TuningError {
    #[error(
        "Invalid --cpu-freq argument \"{0}\": use low, medium, highm1, high or kHz, a governor (OnDemand, Performance, UserSpace), or MIN-MAX:GOVERNOR"
    )]
    CpuFreq(String),
    #[error(
        "Invalid --gpu-freq argument: gpu:{0} (use low, medium, highm1, high or MHz, memory=LEVEL, verbose, separated by commas)"
    )]
    GpuFreq(String),
    #[error(
        "unrecognized --mem-bind argument \"{0}\": use none, local, rank, map_mem:LIST or mask_mem:LIST (with quiet, verbose, sort, nosort, prefer)"
    )]
    MemBind(String),
}

/// Slurm's encoding of a `--cpu-freq` level or governor (`CPU_FREQ_*` in slurm.h): named
/// values carry the range flag, so any of them compares above any kHz figure, as Slurm's
/// min < max check sees them.
const RANGE_FLAG: u32 = 0x8000_0000;
const LEVELS: [(&str, &str, u32); 3] = [
    ("lo", "Low", RANGE_FLAG | 1),
    ("med", "Medium", RANGE_FLAG | 2),
    ("hi", "High", RANGE_FLAG | 3),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Governor {
    Conservative,
    OnDemand,
    Performance,
    PowerSave,
    UserSpace,
    SchedUtil,
}

impl Governor {
    /// Slurm's prefix match (`_cpu_freq_check_gov`).
    fn parse(text: &str) -> Option<Governor> {
        let lower = text.to_ascii_lowercase();
        let pairs = [
            ("co", Governor::Conservative),
            ("perf", Governor::Performance),
            ("pow", Governor::PowerSave),
            ("user", Governor::UserSpace),
            ("onde", Governor::OnDemand),
            ("sche", Governor::SchedUtil),
        ];
        pairs
            .iter()
            .find(|(p, _)| lower.starts_with(p))
            .map(|(_, g)| *g)
    }

    fn name(self) -> &'static str {
        match self {
            Governor::Conservative => "Conservative",
            Governor::OnDemand => "OnDemand",
            Governor::Performance => "Performance",
            Governor::PowerSave => "PowerSave",
            Governor::UserSpace => "UserSpace",
            Governor::SchedUtil => "SchedUtil",
        }
    }

    /// Slurm's default `CpuFreqGovernors` (OnDemand,Performance,UserSpace): the others are
    /// "not allowed in slurm.conf".
    fn allowed(self) -> bool {
        matches!(
            self,
            Governor::OnDemand | Governor::Performance | Governor::UserSpace
        )
    }
}

/// A frequency: a named level or kHz (`_cpu_freq_check_freq`).
fn cpu_level(text: &str) -> Option<(u32, String)> {
    let lower = text.to_ascii_lowercase();
    if lower.starts_with("him1") || lower.starts_with("highm1") {
        return Some((RANGE_FLAG | 4, "Highm1".into()));
    }
    if let Some((_, name, v)) = LEVELS.iter().find(|(p, _, _)| lower.starts_with(p)) {
        return Some((*v, (*name).into()));
    }
    let digits: String = text.chars().take_while(|c| c.is_ascii_digit()).collect();
    match digits.parse::<u32>() {
        Ok(n) if n > 0 => Some((n, n.to_string())),
        _ => None,
    }
}

/// `--cpu-freq=p1[-p2][:p3]`: the value of `SLURM_CPU_FREQ_REQ` (Slurm's
/// `cpu_freq_to_cmdline`), with no `CpuFreqDef` (so a range needs a governor) and the
/// default `CpuFreqGovernors`.
pub fn cpu_freq(text: &str) -> Result<String, TuningError> {
    let bad = || TuningError::CpuFreq(text.to_string());
    let (range, p3) = match text.split_once(':') {
        Some((r, g)) => (r, Some(g)),
        None => (text, None),
    };
    let (p1, p2) = match range.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (range, None),
    };
    let (mut max, mut gov) = (None, None);
    if let Some(g) = Governor::parse(p1) {
        if p3.is_some() {
            return Err(bad());
        }
        gov = Some(g);
    } else {
        max = Some(cpu_level(p1).ok_or_else(bad)?);
    }
    let mut min = None;
    if let Some(p2) = p2 {
        if p3.is_none() {
            return Err(bad());
        }
        let top = cpu_level(p2).ok_or_else(bad)?;
        min = max.take();
        if min.as_ref().is_some_and(|m: &(u32, String)| top.0 < m.0) {
            return Err(bad());
        }
        max = Some(top);
    }
    if let Some(p3) = p3 {
        let g = Governor::parse(p3).ok_or_else(bad)?;
        match (p2.is_some(), g) {
            (false, g) if g != Governor::UserSpace => return Err(bad()),
            (true, Governor::UserSpace) => return Err(bad()),
            _ => {}
        }
        gov = Some(g);
    }
    if gov.is_none() && p2.is_none() {
        gov = Some(Governor::UserSpace);
    }
    if gov.is_some_and(|g| !g.allowed()) {
        return Err(bad());
    }
    let gov = gov.map(Governor::name);
    Ok(match (min, max, gov) {
        (Some((_, lo)), Some((_, hi)), Some(g)) => format!("{lo}-{hi}:{g}"),
        (Some((_, lo)), Some((_, hi)), None) => format!("{lo}-{hi}"),
        (_, Some((_, hi)), _) => hi,
        (_, None, Some(g)) => g.to_string(),
        _ => return Err(bad()),
    })
}

/// One `--gpu-freq` value: a level or MHz (`_test_val`).
fn gpu_level(text: &str) -> bool {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        return text.chars().all(|c| c.is_ascii_digit()) && text.parse::<i64>().is_ok();
    }
    matches!(text, "low" | "medium" | "high" | "highm1")
}

/// `--gpu-freq=[<type=]value>[,<type=value>][,verbose]`: Slurm takes a level or MHz for
/// the graphics clock, `memory=` for the memory clock, and `verbose`; the value is
/// `SLURM_GPU_FREQ` as given.
pub fn gpu_freq(text: &str) -> Result<String, TuningError> {
    let ok = !text.is_empty()
        && text
            .split(',')
            .filter(|t| !t.is_empty())
            .all(|tok| match tok.split_once('=') {
                None => gpu_level(tok) || tok == "verbose",
                Some(("memory", v)) => gpu_level(v),
                Some(_) => false,
            });
    if ok {
        Ok(text.to_string())
    } else {
        Err(TuningError::GpuFreq(text.to_string()))
    }
}

/// A `--mem-bind` as Slurm's `mem_bind_type` flags hold it: the last of none, rank,
/// local, map_mem or mask_mem wins, with its list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemBind {
    pub verbose: bool,
    pub prefer: bool,
    pub sort: bool,
    /// `none`, `rank`, `local`, `map_mem` or `mask_mem`, and the list of the last two.
    pub kind: Option<(&'static str, String)>,
}

impl MemBind {
    /// `SLURM_MEM_BIND` of a batch job (sbatch's `slurm_xstr_mem_bind_type`, then
    /// `:LIST`).
    pub fn job_value(&self) -> String {
        let mut words = Vec::new();
        if self.verbose {
            words.push("verbose");
        }
        if self.prefer {
            words.push("prefer");
        }
        if self.sort {
            words.push("sort");
        }
        if let Some((kind, _)) = &self.kind {
            words.push(kind);
        }
        let mut out = words.join(",");
        if let Some((_, list)) = self.kind.as_ref().filter(|(_, l)| !l.is_empty()) {
            out.push(':');
            out.push_str(list);
        }
        out
    }

    /// `SLURM_MEM_BIND_VERBOSE`.
    pub fn verbosity(&self) -> &'static str {
        if self.verbose { "verbose" } else { "quiet" }
    }

    /// The variables a step's tasks get (env.c's `setup_env`): `SLURM_MEM_BIND`,
    /// `_LIST`, `_TYPE`, `_VERBOSE`, and `_PREFER`, `_SORT` when set.
    pub fn step_vars(&self) -> Vec<(&'static str, String)> {
        let (kind, list) = match &self.kind {
            Some(("map_mem", l)) => ("map_mem:".to_string(), l.clone()),
            Some(("mask_mem", l)) => ("mask_mem:".to_string(), l.clone()),
            Some((k, _)) => (k.to_string(), String::new()),
            None => (String::new(), String::new()),
        };
        let mut bind = self.verbosity().to_string();
        if self.prefer {
            bind.push_str(",prefer");
        }
        if !kind.is_empty() {
            bind.push(',');
            bind.push_str(&kind);
            bind.push_str(&list);
        }
        let mut vars = vec![
            ("SLURM_MEM_BIND", bind),
            ("SLURM_MEM_BIND_LIST", list),
            ("SLURM_MEM_BIND_TYPE", kind),
            ("SLURM_MEM_BIND_VERBOSE", self.verbosity().to_string()),
        ];
        if self.prefer {
            vars.push(("SLURM_MEM_BIND_PREFER", "prefer".into()));
        }
        if self.sort {
            vars.push(("SLURM_MEM_BIND_SORT", "sort".into()));
        }
        vars
    }
}

/// `--mem-bind`, as `slurm_verify_mem_bind` reads it.
pub fn mem_bind(text: &str) -> Result<MemBind, TuningError> {
    MemBind::default().and(text)
}

impl MemBind {
    /// These flags with `text`'s over them, as srun reads `--mem-bind` over an inherited
    /// `SLURM_MEM_BIND` (the flags add up; the kind is replaced).
    pub fn and(self, text: &str) -> Result<MemBind, TuningError> {
        let mut m = self;
        for tok in mem_bind_tokens(text) {
            let lower = tok.to_ascii_lowercase();
            let listed = |prefixes: &[&str]| {
                prefixes
                    .iter()
                    .any(|p| lower.starts_with(p))
                    .then(|| tok.split([':', '=']).nth(1).unwrap_or("").to_string())
            };
            match lower.as_str() {
                "p" | "prefer" => m.prefer = true,
                "nosort" => m.sort = false,
                "sort" => m.sort = true,
                "q" | "quiet" => m.verbose = false,
                "v" | "verbose" => m.verbose = true,
                "no" | "none" => m.kind = Some(("none", String::new())),
                "rank" => m.kind = Some(("rank", String::new())),
                "local" => m.kind = Some(("local", String::new())),
                _ => {
                    let kind = if let Some(l) = listed(&["map_mem", "mapmem"]) {
                        ("map_mem", l)
                    } else if let Some(l) = listed(&["mask_mem", "maskmem"]) {
                        ("mask_mem", l)
                    } else {
                        return Err(TuningError::MemBind(tok.to_string()));
                    };
                    if kind.1.is_empty() {
                        return Err(TuningError::MemBind(tok.to_string()));
                    }
                    m.kind = Some(kind);
                }
            }
        }
        Ok(m)
    }
}

/// Slurm's split: a comma followed by a digit (or a `0x` mask) stays inside a map/mask
/// list; any other comma separates options.
fn mem_bind_tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b',' && !bytes.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            out.push(&text[start..i]);
            start = i + 1;
        }
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form of cpu_freq_verify_cmdline's comment, with what Slurm 22.05.8 (the
    /// project's peer, default CpuFreqGovernors, no CpuFreqDef) put in SLURM_CPU_FREQ_REQ
    /// or refused.
    #[test]
    fn cpu_freq_reads_slurms_grammar() {
        for (given, want) in [
            ("high", "High"),
            ("HIGH", "High"),
            ("hi", "High"),
            ("low", "Low"),
            ("medium", "Medium"),
            ("highm1", "Highm1"),
            ("him1", "Highm1"),
            ("2000000", "2000000"),
            ("Performance", "Performance"),
            ("performance", "Performance"),
            ("ondemand", "OnDemand"),
            ("UserSpace", "UserSpace"),
            ("1000-2000:ondemand", "1000-2000:OnDemand"),
            ("low-high:Performance", "Low-High:Performance"),
            ("2000:userspace", "2000"),
        ] {
            assert_eq!(cpu_freq(given).as_deref(), Ok(want), "{given}");
        }
        for refused in [
            "bogus",
            "",
            "1000-2000",
            "2000-1000:ondemand",
            "high-2000:performance",
            "1000-2000:userspace",
            "2000:performance",
            "performance:ondemand",
            "conservative",
            "powersave",
            "schedutil",
            "1000-2000:bogus",
        ] {
            assert!(cpu_freq(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn gpu_freq_reads_slurms_grammar() {
        for ok in [
            "high",
            "low",
            "medium",
            "highm1",
            "1500",
            "medium,memory=high,verbose",
            "memory=1000",
            "verbose",
        ] {
            assert_eq!(gpu_freq(ok).as_deref(), Ok(ok));
        }
        for refused in [
            "bogus",
            "",
            "High",
            "memory=1000,graphics=1200",
            "memory=fast",
            "-5",
            "15x",
        ] {
            assert!(gpu_freq(refused).is_err(), "{refused}");
        }
    }

    /// Slurm 22.05.8's SLURM_MEM_BIND for batch jobs and steps, as the peer printed them.
    #[test]
    fn mem_bind_reads_slurms_grammar() {
        let job = |t: &str| mem_bind(t).map(|m| (m.job_value(), m.verbosity()));
        assert_eq!(job("local"), Ok(("local".into(), "quiet")));
        assert_eq!(
            job("verbose,local"),
            Ok(("verbose,local".into(), "verbose"))
        );
        assert_eq!(job("v,local"), Ok(("verbose,local".into(), "verbose")));
        assert_eq!(job("map_mem:0,1"), Ok(("map_mem:0,1".into(), "quiet")));
        assert_eq!(job("local,none"), Ok(("none".into(), "quiet")));
        let step = |t: &str| {
            mem_bind("verbose,local")
                .unwrap()
                .and(t)
                .unwrap()
                .step_vars()
        };
        let get = |vars: &[(&str, String)], k: &str| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let v = step("map_mem:0,1");
        assert_eq!(
            get(&v, "SLURM_MEM_BIND").as_deref(),
            Some("verbose,map_mem:0,1")
        );
        assert_eq!(get(&v, "SLURM_MEM_BIND_TYPE").as_deref(), Some("map_mem:"));
        assert_eq!(get(&v, "SLURM_MEM_BIND_LIST").as_deref(), Some("0,1"));
        let v = step("prefer,rank");
        assert_eq!(
            get(&v, "SLURM_MEM_BIND").as_deref(),
            Some("verbose,prefer,rank")
        );
        assert_eq!(get(&v, "SLURM_MEM_BIND_PREFER").as_deref(), Some("prefer"));
        for ok in [
            "none",
            "NO",
            "rank",
            "prefer,local",
            "sort",
            "nosort",
            "q",
            "v,mask_mem:0x1,0x2",
        ] {
            assert!(mem_bind(ok).is_ok(), "{ok}");
        }
        for refused in ["bogus", "map_mem", "map_mem:", "local,bogus", ""] {
            assert!(mem_bind(refused).is_err(), "{refused}");
        }
    }
}

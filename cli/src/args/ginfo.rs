//! `ginfo`'s options: sinfo's, as Slurm's table lists them (`cli/slurm-options/sinfo.tsv`),
//! and gsched's own (`--topo`, `--health`, `--controllers`).

use clap::{ArgAction, Parser};

/// Show nodes: state, GPUs free/total with model, CPUs and memory; with sinfo's options,
/// sinfo's listings (by partition, -N by node, -s, -R, -o).
#[derive(Parser, Debug, Clone)]
#[command(name = "ginfo", version, about, disable_help_flag = true)]
pub struct Args {
    /// Print help (-h is sinfo's --noheader).
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
    /// A one-line summary of the options.
    #[arg(long)]
    pub usage: bool,
    /// No header line.
    #[arg(short = 'h', long = "noheader")]
    pub noheader: bool,
    /// One line per node.
    #[arg(short = 'N', long = "Node")]
    pub node: bool,
    /// sinfo's long listing (after the time).
    #[arg(short = 'l', long = "long", conflicts_with = "format")]
    pub long: bool,
    /// A line per partition: nodes allocated/idle/other/total.
    #[arg(short = 's', long = "summarize")]
    pub summarize: bool,
    /// Why nodes are down or drained, by whom and since when.
    #[arg(short = 'R', long = "list-reasons")]
    pub list_reasons: bool,
    /// sinfo's output format: `%[.][width]letter` fields, e.g. "%P %.6D %t %N".
    #[arg(short = 'o', long = "format", conflicts_with = "long_format")]
    pub format: Option<String>,
    /// sinfo's field names with optional widths, e.g. "NodeList:20,StateLong,Gres".
    #[arg(short = 'O', long = "Format")]
    pub long_format: Option<String>,
    /// Only these partitions (comma separated).
    #[arg(short = 'p', long = "partition", value_delimiter = ',')]
    pub partition: Vec<String>,
    /// Only these nodes (a host list).
    #[arg(short = 'n', long = "nodes")]
    pub nodes: Option<String>,
    /// Only nodes in these states (idle, mix, alloc, drain, drained, draining, down,
    /// maint, resv, no_respond).
    #[arg(short = 't', long = "states", value_delimiter = ',')]
    pub states: Vec<String>,
    /// Only nodes whose agent answers.
    #[arg(short = 'r', long = "responding", conflicts_with = "dead")]
    pub responding: bool,
    /// Only nodes whose agent does not answer.
    #[arg(short = 'd', long = "dead")]
    pub dead: bool,
    /// Nodes that differ in CPUs, memory or GPUs are never one line.
    #[arg(short = 'e', long = "exact")]
    pub exact: bool,
    /// Sort lines by these fields (format letters, `-` before one for descending).
    #[arg(short = 'S', long = "sort", allow_hyphen_values = true)]
    pub sort: Option<String>,
    /// List again every SECONDS, each time after the time.
    #[arg(short = 'i', long = "iterate", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterate: Option<u64>,
    /// Draw this node's GPU/NIC wiring.
    #[arg(long)]
    pub topo: Option<String>,
    /// Show recent health events.
    #[arg(long)]
    pub health: bool,
    /// JSON: gsched's own document (`ginfo --json`).
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub controllers: Option<String>,

    // Slurm's options that cannot change the answer here, or that gsched refuses
    // (cli/slurm-options/sinfo.tsv says which and why).
    #[arg(short = 'a', long, hide = true)]
    pub all: bool,
    #[arg(short = 'M', long = "clusters", alias = "cluster", hide = true)]
    pub clusters: Option<String>,
    #[arg(long, hide = true)]
    pub federation: bool,
    #[arg(long, hide = true)]
    pub hide: bool,
    #[arg(long, hide = true)]
    pub local: bool,
    #[arg(long, hide = true)]
    pub noconvert: bool,
    #[arg(short = 'T', long, hide = true)]
    pub reservation: bool,
    #[arg(short = 'v', long, action = ArgAction::Count, hide = true)]
    pub verbose: u8,
    #[arg(long, hide = true)]
    pub yaml: bool,
}

impl Args {
    /// Whether any of sinfo's listing options was given (else `ginfo` prints its own
    /// table, `sinfo` its default listing).
    pub fn sinfo_listing(&self) -> bool {
        self.noheader
            || self.node
            || self.long
            || self.summarize
            || self.list_reasons
            || self.format.is_some()
            || self.long_format.is_some()
            || !self.partition.is_empty()
            || self.nodes.is_some()
            || !self.states.is_empty()
            || self.responding
            || self.dead
            || self.exact
            || self.sort.is_some()
            || self.iterate.is_some()
    }
}

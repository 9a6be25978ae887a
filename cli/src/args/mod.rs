//! The query tools' options as clap definitions, here so that `tests/option_tables.rs`
//! can hold each to Slurm's table (`cli/slurm-options/TOOL.tsv`): `gqueue` (squeue),
//! `gacct` (sacct), `ginfo` (sinfo), `gcancel` (scancel) and the options scontrol takes
//! before its command.

pub mod gacct;
pub mod gcancel;
pub mod ginfo;
pub mod gqueue;
pub mod scontrol;

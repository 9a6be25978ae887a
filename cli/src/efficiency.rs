//! `gacct --eff` and `seff`: a job's efficiency report as text, a bar per GPU and per
//! node and the advice, as Princeton's jobstats prints it. The text is
//! `gsched_types::usage::Efficiency::render`, which the controllers' notifications
//! carry too.

use gsched_types::usage::Efficiency;

/// The report as `gacct --eff` prints it.
pub fn render(e: &Efficiency) -> String {
    e.render()
}

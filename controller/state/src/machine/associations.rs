//! Accounts, users and QOS edited at run time: who may make an edit, applying it to the
//! replicated configuration, and keeping the edits when a controller's configuration
//! file is committed again.

use super::ClusterState;
use crate::command::{EditAssociations, Outcome};
use gsched_scheduler::SchedConfig;
use gsched_types::JobSpec;
use gsched_types::assoc::{
    AccountConfig, AssocEdit, AssocError, Associations, QosConfig, UserConfig, lineage,
};

/// The three association lists, held while a configuration is replaced.
pub(super) struct Kept {
    accounts: Vec<AccountConfig>,
    users: Vec<UserConfig>,
    qos: Vec<QosConfig>,
}

impl ClusterState {
    pub(super) fn edit_associations(&mut self, c: &EditAssociations) -> Outcome {
        let own = c.edit.own_notify_settings() == Some(c.by.as_str());
        if !c.admin && !own && !coordinates(&self.config, &c.by, &c.edit) {
            return Outcome::PermissionDenied {
                message: format!(
                    "{} may not change accounts, users or QOS: admins only (an account's coordinators may add and remove its users; users may set their own --notify and --notify-on)",
                    c.by
                ),
            };
        }
        match edit(&mut self.config, &c.edit) {
            Ok(_) => {
                self.associations_edited = true;
                Outcome::Ok
            }
            Err(e @ AssocError::Missing(..)) => Outcome::NotFound {
                message: e.to_string(),
            },
            Err(e) => Outcome::Rejected {
                message: e.to_string(),
            },
        }
    }

    pub(super) fn take_associations(&mut self) -> Kept {
        Kept {
            accounts: std::mem::take(&mut self.config.accounts),
            users: std::mem::take(&mut self.config.users),
            qos: std::mem::take(&mut self.config.qos),
        }
    }

    pub(super) fn put_associations(&mut self, kept: Kept) {
        self.config.accounts = kept.accounts;
        self.config.users = kept.users;
        self.config.qos = kept.qos;
    }

    /// The account a user's job charges when it names none: their association's
    /// default, once users have associations.
    pub(super) fn default_account(&self, user: &str) -> Option<String> {
        let u = self.config.users.iter().find(|u| u.name == user)?;
        Some(u.default_account.clone())
    }

    /// Why `spec` may not be submitted under the associations: an account the user is
    /// not in, or a `MaxSubmitJobs` of the user, the account (or one above it) or the QOS.
    pub(super) fn association_refuses(&self, spec: &JobSpec) -> Option<String> {
        let config = &self.config;
        let account = spec.account_name();
        let adding = spec.array.as_ref().map_or(1, |a| a.len()) as u64;
        let user = config.users.iter().find(|u| u.name == spec.user);
        if !config.users.is_empty() && spec.user != "root" {
            let Some(u) = user else {
                return Some(format!(
                    "Invalid account or account/partition combination specified: user {} has no account association (an admin adds one: gctl user add {} --account ACCOUNT)",
                    spec.user, spec.user
                ));
            };
            if !u.accounts.iter().any(|a| a == account) {
                return Some(format!(
                    "Invalid account or account/partition combination specified: user {} may charge {} (not {account})",
                    spec.user,
                    u.accounts.join(", ")
                ));
            }
        }
        let limit = |what: String, max: u32, mine: u64| {
            (mine + adding > u64::from(max)).then(|| {
                format!(
                    "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits): user {} would have {} jobs queued or running {what}; the limit is {max} (MaxSubmitJobs)",
                    spec.user,
                    mine + adding
                )
            })
        };
        let assoc_max = user
            .and_then(|u| u.max_submit_jobs)
            .or_else(|| lineage(&config.accounts, account).find_map(|a| a.max_submit_jobs));
        if let Some(max) = assoc_max {
            let mine = self.not_ended(|j| j.user == spec.user && j.account_name() == account);
            if let Some(m) = limit(format!("in account {account}"), max, mine) {
                return Some(m);
            }
        }
        if let Some(q) = config.qos(spec.qos.as_deref())
            && let Some(max) = q.max_submit_jobs_per_user
        {
            let mine = self.not_ended(|j| j.user == spec.user && j.qos.as_deref() == Some(&q.name));
            if let Some(m) = limit(format!("in QOS {}", q.name), max, mine) {
                return Some(m);
            }
        }
        None
    }

    /// How many jobs that have not ended have a spec `keep` accepts.
    fn not_ended(&self, keep: impl Fn(&JobSpec) -> bool) -> u64 {
        self.jobs
            .values()
            .filter(|j| !j.state.is_terminal() && keep(&j.spec))
            .count() as u64
    }

    /// Whether committing `file` (a controller's `[scheduler]` settings) would change
    /// anything: once the associations were edited at run time, the file's accounts,
    /// users and QOS no longer count (they only seed a new cluster).
    pub fn config_differs_from(&self, file: &SchedConfig) -> bool {
        if !self.associations_edited {
            return self.config != *file;
        }
        let strip = |c: &SchedConfig| SchedConfig {
            accounts: Vec::new(),
            users: Vec::new(),
            qos: Vec::new(),
            ..c.clone()
        };
        strip(&self.config) != strip(file)
    }
}

/// Applies `e` to `config`'s associations; the message says what was done.
pub fn edit(config: &mut SchedConfig, e: &AssocEdit) -> Result<String, AssocError> {
    Associations {
        accounts: &mut config.accounts,
        users: &mut config.users,
        qos: &mut config.qos,
    }
    .apply(e)
}

/// `by` coordinates every account the edit is about (or one above it).
fn coordinates(config: &SchedConfig, by: &str, e: &AssocEdit) -> bool {
    let Some(accounts) = e.coordinated_accounts() else {
        return false;
    };
    !accounts.is_empty()
        && accounts
            .iter()
            .all(|a| lineage(&config.accounts, a).any(|x| x.coordinators.iter().any(|c| c == by)))
}

//! Accounts, users and QOS (Slurm's associations): the records the scheduler enforces,
//! the edits `gctl account|user|qos` and `sacctmgr` make to them at run time, and the
//! pure function that applies one edit or says why it cannot.

use serde::{Deserialize, Serialize};

/// A QOS: priority, per-user limits and whom it may preempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    pub name: String,
    #[serde(default)]
    pub priority: u32,
    /// GPUs one user's running jobs may hold (`MaxTRESPerUser=gres/gpu=N`).
    #[serde(default)]
    pub max_gpus_per_user: Option<u32>,
    /// Running jobs per user (`MaxJobsPerUser`).
    #[serde(default)]
    pub max_jobs_per_user: Option<u32>,
    /// Longest time limit a job may have (`MaxWall`).
    #[serde(default)]
    pub max_time_s: Option<u64>,
    /// QOS names whose running jobs this QOS may preempt (by requeue) when preemption is on.
    #[serde(default)]
    pub preempt: Vec<String>,
    /// Jobs per user queued or running (`MaxSubmitJobsPerUser`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs_per_user: Option<u32>,
}

/// An account: its fair-share weight, its place in the tree and its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccountConfig {
    pub name: String,
    #[serde(default = "one")]
    pub shares: u32,
    /// GPUs the account's running jobs may hold together, its sub-accounts' included
    /// (`GrpTRES=gres/gpu=N`).
    #[serde(default)]
    pub max_gpus: Option<u32>,
    /// The account above this one (`Parent`); none: directly under root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Users who may add and remove this account's users (`Coordinator`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coordinators: Vec<String>,
    /// Running jobs per user in this account (`MaxJobs`, inherited by sub-accounts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    /// Jobs per user queued or running in this account (`MaxSubmitJobs`, inherited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs: Option<u32>,
    /// Longest time limit of a job in this account (`MaxWall`, inherited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_s: Option<u64>,
}

fn one() -> u32 {
    1
}

/// A user's associations: the accounts they may charge and their own limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// The account of their jobs that name none (`DefaultAccount`).
    pub default_account: String,
    /// Every account they may use, the default one included.
    pub accounts: Vec<String>,
    /// Running jobs (`MaxJobs`), over the account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    /// Jobs queued or running (`MaxSubmitJobs`), over the account's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs: Option<u32>,
    /// Where their jobs' notifications go and, for jobs without `--mail-type`, which
    /// events they notify (`gctl user modify NAME --notify ... --notify-on ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<crate::notify::UserNotify>,
}

/// An account or QOS name as Slurm stores it: lower case. sacctmgr lower-cases the names
/// it is given (`slurm_addto_char_list`) and slurmctld a job's `--account` and `--wckey`
/// ("anything that may be put in the database", job_mgr.c), so `IscrB_SCORE` and
/// `iscrb_score` are one account; QOS names are looked up without regard to case.
pub fn slurm_case(name: &str) -> String {
    name.to_ascii_lowercase()
}

fn slurm_case_all(names: &mut [String]) {
    for n in names {
        *n = slurm_case(n);
    }
}

impl QosConfig {
    /// This record with its names as Slurm stores them ([`slurm_case`]).
    pub fn in_slurm_case(&mut self) {
        self.name = slurm_case(&self.name);
        slurm_case_all(&mut self.preempt);
    }
}

impl AccountConfig {
    /// This record with its names as Slurm stores them ([`slurm_case`]).
    pub fn in_slurm_case(&mut self) {
        self.name = slurm_case(&self.name);
        self.parent = self.parent.as_deref().map(slurm_case);
    }
}

impl UserConfig {
    /// This record with its accounts' names as Slurm stores them ([`slurm_case`]); the
    /// user's own name is a Unix name and keeps its case.
    pub fn in_slurm_case(&mut self) {
        self.default_account = slurm_case(&self.default_account);
        slurm_case_all(&mut self.accounts);
    }
}

/// What an edit is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssocEntity {
    Account,
    User,
    Qos,
}

impl AssocEntity {
    pub fn name(self) -> &'static str {
        match self {
            AssocEntity::Account => "account",
            AssocEntity::User => "user",
            AssocEntity::Qos => "QOS",
        }
    }
}

/// A limit an edit sets: a value, or cleared (sacctmgr's `-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    Set(u64),
    Clear,
}

impl Limit {
    /// sacctmgr's spelling: a number, `-1` to clear.
    pub fn parse(s: &str) -> Result<Limit, crate::error::InputError> {
        let s = s.trim();
        if s == "-1" {
            return Ok(Limit::Clear);
        }
        s.parse()
            .map(Limit::Set)
            .map_err(|_| crate::error::InputError::Limit(s.to_string()))
    }

    fn to_u32(self) -> Result<Option<u32>, AssocError> {
        match self {
            Limit::Clear => Ok(None),
            Limit::Set(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| AssocError::Invalid(format!("{v} is too large for this limit"))),
        }
    }

    fn to_u64(self) -> Option<u64> {
        match self {
            Limit::Clear => None,
            Limit::Set(v) => Some(v),
        }
    }
}

/// The fields an add or modify sets; what is absent is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AssocFields {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fairshare: Option<u32>,
    /// `GrpTRES=gres/gpu=N` (account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grp_gpus: Option<Limit>,
    /// `MaxTRESPerUser=gres/gpu=N` (QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gpus_per_user: Option<Limit>,
    /// `MaxJobs` (account, user) or `MaxJobsPerUser` (QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<Limit>,
    /// `MaxSubmitJobs` (account, user) or `MaxSubmitJobsPerUser` (QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_submit_jobs: Option<Limit>,
    /// `MaxWall` in seconds (account, QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wall_s: Option<Limit>,
    /// `Priority` (QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// `Preempt` (QOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempt: Option<Vec<String>>,
    /// `Account`: the accounts a user is added to (user).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accounts: Option<Vec<String>>,
    /// `DefaultAccount` (user).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_account: Option<String>,
    /// `Coordinator` (account).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinators: Option<Vec<String>>,
    /// Where the user's jobs' notifications go (user; empty: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Vec<crate::notify::NotifyTarget>>,
    /// The events their jobs without `--mail-type` notify (user; empty: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify_on: Option<Vec<crate::notify::MailType>>,
}

impl AssocFields {
    /// The Slurm field names set here that `entity` does not have.
    fn foreign_to(&self, entity: AssocEntity) -> Vec<&'static str> {
        let set = [
            ("Parent", self.parent.is_some(), [true, false, false]),
            ("Fairshare", self.fairshare.is_some(), [true, false, false]),
            ("GrpTRES", self.grp_gpus.is_some(), [true, false, false]),
            (
                "MaxTRESPerUser",
                self.max_gpus_per_user.is_some(),
                [false, false, true],
            ),
            ("MaxJobs", self.max_jobs.is_some(), [true, true, true]),
            (
                "MaxSubmitJobs",
                self.max_submit_jobs.is_some(),
                [true, true, true],
            ),
            ("MaxWall", self.max_wall_s.is_some(), [true, false, true]),
            ("Priority", self.priority.is_some(), [false, false, true]),
            ("Preempt", self.preempt.is_some(), [false, false, true]),
            ("Account", self.accounts.is_some(), [false, true, false]),
            (
                "DefaultAccount",
                self.default_account.is_some(),
                [false, true, false],
            ),
            (
                "Coordinator",
                self.coordinators.is_some(),
                [true, false, false],
            ),
            ("Notify", self.notify.is_some(), [false, true, false]),
            ("NotifyOn", self.notify_on.is_some(), [false, true, false]),
        ];
        let column = entity as usize;
        set.iter()
            .filter(|(_, given, applies)| *given && !applies[column])
            .map(|(name, _, _)| *name)
            .collect()
    }
}

/// One change to the associations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AssocEdit {
    Add {
        entity: AssocEntity,
        name: String,
        fields: AssocFields,
    },
    Modify {
        entity: AssocEntity,
        name: String,
        fields: AssocFields,
    },
    /// Deletes the record; for a user with `account`, only that association.
    Delete {
        entity: AssocEntity,
        name: String,
        #[serde(default)]
        account: Option<String>,
    },
}

impl AssocEdit {
    /// The edit with account and QOS names as Slurm stores them ([`slurm_case`]): the
    /// record's own name unless it is a user, and every account or QOS it refers to.
    pub fn in_slurm_case(&mut self) {
        let (entity, name, fields, account) = match self {
            AssocEdit::Add {
                entity,
                name,
                fields,
            }
            | AssocEdit::Modify {
                entity,
                name,
                fields,
            } => (*entity, name, Some(fields), None),
            AssocEdit::Delete {
                entity,
                name,
                account,
            } => (*entity, name, None, account.as_mut()),
        };
        if entity != AssocEntity::User {
            *name = slurm_case(name);
        }
        if let Some(a) = account {
            *a = slurm_case(a);
        }
        if let Some(f) = fields {
            f.parent = f.parent.as_deref().map(slurm_case);
            f.default_account = f.default_account.as_deref().map(slurm_case);
            for list in [f.accounts.as_mut(), f.preempt.as_mut()]
                .into_iter()
                .flatten()
            {
                slurm_case_all(list);
            }
        }
    }

    /// The user whose own notification settings this edit changes, and nothing else: a
    /// user may make such an edit of their own record.
    pub fn own_notify_settings(&self) -> Option<&str> {
        match self {
            AssocEdit::Modify {
                entity: AssocEntity::User,
                name,
                fields,
            } => {
                let only_notify = AssocFields {
                    notify: None,
                    notify_on: None,
                    ..fields.clone()
                } == AssocFields::default();
                (only_notify && (fields.notify.is_some() || fields.notify_on.is_some()))
                    .then_some(name.as_str())
            }
            _ => None,
        }
    }

    pub fn entity(&self) -> AssocEntity {
        match self {
            AssocEdit::Add { entity, .. }
            | AssocEdit::Modify { entity, .. }
            | AssocEdit::Delete { entity, .. } => *entity,
        }
    }

    /// The accounts whose coordinators may make this edit: only edits of users'
    /// memberships, and only of the accounts they name.
    pub fn coordinated_accounts(&self) -> Option<Vec<String>> {
        match self {
            AssocEdit::Add {
                entity: AssocEntity::User,
                fields,
                ..
            } => {
                let only_accounts = AssocFields {
                    accounts: None,
                    default_account: None,
                    ..fields.clone()
                } == AssocFields::default();
                only_accounts.then(|| {
                    let mut named = fields.accounts.clone().unwrap_or_default();
                    named.extend(fields.default_account.clone());
                    named
                })
            }
            AssocEdit::Delete {
                entity: AssocEntity::User,
                account: Some(a),
                ..
            } => Some(vec![a.clone()]),
            _ => None,
        }
    }
}

/// The records an edit changes: the replicated configuration's three lists.
pub struct Associations<'a> {
    pub accounts: &'a mut Vec<AccountConfig>,
    pub users: &'a mut Vec<UserConfig>,
    pub qos: &'a mut Vec<QosConfig>,
}

/// Why an edit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssocError {
    #[error("{entity} '{1}' already exists (use modify to change it)", entity = .0.name())]
    Exists(AssocEntity, String),
    #[error("{entity} '{1}' does not exist ({show} lists them)", entity = .0.name(), show = show_command(*.0))]
    Missing(AssocEntity, String),
    #[error("{fields} cannot be set on a {entity}", fields = .1.join(", "), entity = .0.name())]
    Foreign(AssocEntity, Vec<&'static str>),
    #[error("{0}")]
    Invalid(String),
}

fn show_command(entity: AssocEntity) -> &'static str {
    match entity {
        AssocEntity::Account => "gctl account show",
        AssocEntity::User => "gctl user show",
        AssocEntity::Qos => "gctl qos show",
    }
}

impl Associations<'_> {
    /// Applies `edit`, or changes nothing and says why; the message says what was done.
    pub fn apply(&mut self, edit: &AssocEdit) -> Result<String, AssocError> {
        let entity = edit.entity();
        if let AssocEdit::Add { fields, .. } | AssocEdit::Modify { fields, .. } = edit {
            let foreign = fields.foreign_to(entity);
            if !foreign.is_empty() {
                return Err(AssocError::Foreign(entity, foreign));
            }
            if let Some(Limit::Set(wall)) = fields.max_wall_s
                && wall > crate::parse::MAX_TIME_LIMIT_S
            {
                return Err(AssocError::Invalid(format!(
                    "MaxWall of {wall} s is longer than ten years (3650-00:00:00, the longest time limit gsched keeps); use -1 for none"
                )));
            }
        }
        match edit {
            AssocEdit::Add { name, fields, .. } => self.add(entity, name, fields),
            AssocEdit::Modify { name, fields, .. } => self.modify(entity, name, fields),
            AssocEdit::Delete { name, account, .. } => {
                self.delete(entity, name, account.as_deref())
            }
        }
    }

    fn add(
        &mut self,
        entity: AssocEntity,
        name: &str,
        f: &AssocFields,
    ) -> Result<String, AssocError> {
        check_name(name)?;
        match entity {
            AssocEntity::Account => {
                if name == "root" || self.account(name).is_some() {
                    return Err(AssocError::Exists(entity, name.into()));
                }
                let mut a = AccountConfig {
                    name: name.into(),
                    shares: 1,
                    max_gpus: None,
                    parent: None,
                    coordinators: Vec::new(),
                    max_jobs: None,
                    max_submit_jobs: None,
                    max_wall_s: None,
                };
                self.set_account(&mut a, f)?;
                self.accounts.push(a);
                Ok(format!("Added account {name}"))
            }
            AssocEntity::User => {
                let accounts = f.accounts.clone().unwrap_or_default();
                let default = f.default_account.clone().or(accounts.first().cloned());
                let Some(default) = default else {
                    return Err(AssocError::Invalid(format!(
                        "a user needs an account: gctl user add {name} --account ACCOUNT"
                    )));
                };
                let mut wanted = accounts;
                if !wanted.contains(&default) {
                    wanted.push(default.clone());
                }
                for a in &wanted {
                    if self.account(a).is_none() {
                        return Err(AssocError::Missing(AssocEntity::Account, a.clone()));
                    }
                }
                match self.users.iter_mut().find(|u| u.name == name) {
                    Some(u) => {
                        let new: Vec<String> = wanted
                            .into_iter()
                            .filter(|a| !u.accounts.contains(a))
                            .collect();
                        if new.is_empty() && f.default_account.is_none() {
                            return Err(AssocError::Exists(entity, name.into()));
                        }
                        u.accounts.extend(new);
                        if let Some(d) = &f.default_account {
                            u.default_account = d.clone();
                        }
                        set_user_limits(u, f)?;
                    }
                    None => {
                        let mut u = UserConfig {
                            name: name.into(),
                            default_account: default,
                            accounts: wanted,
                            max_jobs: None,
                            max_submit_jobs: None,
                            notify: None,
                        };
                        set_user_limits(&mut u, f)?;
                        self.users.push(u);
                    }
                }
                Ok(format!("Added user {name}"))
            }
            AssocEntity::Qos => {
                if self.qos.iter().any(|q| q.name == name) {
                    return Err(AssocError::Exists(entity, name.into()));
                }
                let mut q = QosConfig {
                    name: name.into(),
                    priority: 0,
                    max_gpus_per_user: None,
                    max_jobs_per_user: None,
                    max_time_s: None,
                    preempt: Vec::new(),
                    max_submit_jobs_per_user: None,
                };
                self.set_qos(&mut q, f)?;
                self.qos.push(q);
                Ok(format!("Added QOS {name}"))
            }
        }
    }

    fn modify(
        &mut self,
        entity: AssocEntity,
        name: &str,
        f: &AssocFields,
    ) -> Result<String, AssocError> {
        let missing = || AssocError::Missing(entity, name.into());
        match entity {
            AssocEntity::Account => {
                let mut a = self.account(name).cloned().ok_or_else(missing)?;
                self.set_account(&mut a, f)?;
                if let Some(slot) = self.accounts.iter_mut().find(|x| x.name == name) {
                    *slot = a;
                }
            }
            AssocEntity::User => {
                if let Some(d) = &f.default_account {
                    let u = self
                        .users
                        .iter()
                        .find(|u| u.name == name)
                        .ok_or_else(missing)?;
                    if !u.accounts.contains(d) {
                        return Err(AssocError::Invalid(format!(
                            "user {name} is not in account {d}: gctl user add {name} --account {d} first"
                        )));
                    }
                }
                if f.accounts.is_some() {
                    return Err(AssocError::Invalid(
                        "accounts are added with gctl user add and removed with gctl user delete --account".into(),
                    ));
                }
                let u = self
                    .users
                    .iter_mut()
                    .find(|u| u.name == name)
                    .ok_or_else(missing)?;
                if let Some(d) = &f.default_account {
                    u.default_account = d.clone();
                }
                set_user_limits(u, f)?;
            }
            AssocEntity::Qos => {
                let mut q = self
                    .qos
                    .iter()
                    .find(|q| q.name == name)
                    .cloned()
                    .ok_or_else(missing)?;
                self.set_qos(&mut q, f)?;
                if let Some(slot) = self.qos.iter_mut().find(|x| x.name == name) {
                    *slot = q;
                }
            }
        }
        Ok(format!("Modified {} {name}", entity.name()))
    }

    fn delete(
        &mut self,
        entity: AssocEntity,
        name: &str,
        account: Option<&str>,
    ) -> Result<String, AssocError> {
        let missing = || AssocError::Missing(entity, name.into());
        match entity {
            AssocEntity::Account => {
                self.account(name).ok_or_else(missing)?;
                if let Some(child) = self
                    .accounts
                    .iter()
                    .find(|a| a.parent.as_deref() == Some(name))
                {
                    return Err(AssocError::Invalid(format!(
                        "account {name} has sub-account {}: delete or move it first",
                        child.name
                    )));
                }
                if let Some(u) = self
                    .users
                    .iter()
                    .find(|u| u.accounts.iter().any(|a| a == name))
                {
                    return Err(AssocError::Invalid(format!(
                        "account {name} still has user {}: gctl user delete {} --account {name} first",
                        u.name, u.name
                    )));
                }
                self.accounts.retain(|a| a.name != name);
            }
            AssocEntity::User => {
                let pos = self
                    .users
                    .iter()
                    .position(|u| u.name == name)
                    .ok_or_else(missing)?;
                let u = &mut self.users[pos];
                match account {
                    Some(a) if u.accounts.len() > 1 => {
                        if !u.accounts.iter().any(|x| x == a) {
                            return Err(AssocError::Invalid(format!(
                                "user {name} is not in account {a}"
                            )));
                        }
                        u.accounts.retain(|x| x != a);
                        if u.default_account == a {
                            u.default_account = u.accounts[0].clone();
                        }
                        return Ok(format!("Deleted user {name} from account {a}"));
                    }
                    Some(a) if u.accounts.iter().all(|x| x != a) => {
                        return Err(AssocError::Invalid(format!(
                            "user {name} is not in account {a}"
                        )));
                    }
                    _ => {
                        self.users.remove(pos);
                    }
                }
            }
            AssocEntity::Qos => {
                if !self.qos.iter().any(|q| q.name == name) {
                    return Err(missing());
                }
                self.qos.retain(|q| q.name != name);
            }
        }
        Ok(format!("Deleted {} {name}", entity.name()))
    }

    fn account(&self, name: &str) -> Option<&AccountConfig> {
        self.accounts.iter().find(|a| a.name == name)
    }

    fn set_account(&self, a: &mut AccountConfig, f: &AssocFields) -> Result<(), AssocError> {
        if let Some(p) = &f.parent {
            if p == "root" {
                a.parent = None;
            } else {
                if self.account(p).is_none() {
                    return Err(AssocError::Missing(AssocEntity::Account, p.clone()));
                }
                if self.ancestors(p).any(|x| x == a.name) {
                    return Err(AssocError::Invalid(format!(
                        "account {p} is under {}: a parent cannot be its own descendant",
                        a.name
                    )));
                }
                a.parent = Some(p.clone());
            }
        }
        if let Some(s) = f.fairshare {
            if s == 0 {
                return Err(AssocError::Invalid("Fairshare must be at least 1".into()));
            }
            a.shares = s;
        }
        if let Some(l) = f.grp_gpus {
            a.max_gpus = l.to_u32()?;
        }
        if let Some(l) = f.max_jobs {
            a.max_jobs = l.to_u32()?;
        }
        if let Some(l) = f.max_submit_jobs {
            a.max_submit_jobs = l.to_u32()?;
        }
        if let Some(l) = f.max_wall_s {
            a.max_wall_s = l.to_u64();
        }
        if let Some(c) = &f.coordinators {
            a.coordinators = c.clone();
        }
        Ok(())
    }

    fn set_qos(&self, q: &mut QosConfig, f: &AssocFields) -> Result<(), AssocError> {
        if let Some(p) = f.priority {
            q.priority = p;
        }
        if let Some(l) = f.max_gpus_per_user {
            q.max_gpus_per_user = l.to_u32()?;
        }
        if let Some(l) = f.max_jobs {
            q.max_jobs_per_user = l.to_u32()?;
        }
        if let Some(l) = f.max_submit_jobs {
            q.max_submit_jobs_per_user = l.to_u32()?;
        }
        if let Some(l) = f.max_wall_s {
            q.max_time_s = l.to_u64();
        }
        if let Some(p) = &f.preempt {
            if let Some(unknown) = p.iter().find(|n| !self.qos.iter().any(|x| &x.name == *n)) {
                return Err(AssocError::Missing(AssocEntity::Qos, unknown.clone()));
            }
            q.preempt = p.clone();
        }
        Ok(())
    }

    /// `name`'s parent, its parent's parent and so on (not `name` itself).
    fn ancestors<'s>(&'s self, name: &str) -> impl Iterator<Item = &'s str> {
        ancestors(self.accounts, name)
    }
}

/// The accounts above `name`, nearest first (at most as many as there are accounts, so a
/// cycle written into a configuration file by hand cannot loop).
pub fn ancestors<'a>(accounts: &'a [AccountConfig], name: &str) -> impl Iterator<Item = &'a str> {
    let mut at = accounts
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.parent.as_deref());
    std::iter::from_fn(move || {
        let here = at?;
        at = accounts
            .iter()
            .find(|a| a.name == here)
            .and_then(|a| a.parent.as_deref());
        Some(here)
    })
    .take(accounts.len())
}

/// `name` and the accounts above it, nearest first.
pub fn lineage<'a>(
    accounts: &'a [AccountConfig],
    name: &'a str,
) -> impl Iterator<Item = &'a AccountConfig> {
    std::iter::once(name)
        .chain(ancestors(accounts, name))
        .filter_map(|n| accounts.iter().find(|a| a.name == n))
}

fn set_user_limits(u: &mut UserConfig, f: &AssocFields) -> Result<(), AssocError> {
    if let Some(l) = f.max_jobs {
        u.max_jobs = l.to_u32()?;
    }
    if let Some(l) = f.max_submit_jobs {
        u.max_submit_jobs = l.to_u32()?;
    }
    if f.notify.is_some() || f.notify_on.is_some() {
        let mut n = u.notify.take().unwrap_or_default();
        if let Some(to) = &f.notify {
            if to.len() > MAX_NOTIFY_TARGETS {
                return Err(AssocError::Invalid(format!(
                    "--notify names {} targets; at most {MAX_NOTIFY_TARGETS}",
                    to.len()
                )));
            }
            for t in to {
                t.check().map_err(|e| AssocError::Invalid(e.to_string()))?;
            }
            n.to = to.clone();
        }
        if let Some(on) = &f.notify_on {
            let mut on = on.clone();
            on.sort();
            on.dedup();
            n.on = on;
        }
        u.notify = (!n.is_empty()).then_some(n);
    }
    Ok(())
}

/// How many targets a user's notification settings may name.
pub const MAX_NOTIFY_TARGETS: usize = 8;

fn check_name(name: &str) -> Result<(), AssocError> {
    if crate::parse::is_plain_name(name) {
        Ok(())
    } else {
        Err(AssocError::Invalid(format!(
            "'{name}' is not a valid name: use up to 64 letters, digits, '_', '-' or '.'"
        )))
    }
}

/// What `gctl account|user|qos` asks the `Associations` RPC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AssocRequest {
    Show { entity: AssocEntity },
    Edit { edit: Box<AssocEdit> },
}

/// The reply: what was done, or the records `Show` asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssocReply {
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub accounts: Vec<AccountConfig>,
    #[serde(default)]
    pub users: Vec<UserConfig>,
    #[serde(default)]
    pub qos: Vec<QosConfig>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_and_qos_names_are_stored_lower_case_and_user_names_keep_theirs() {
        let mut add = AssocEdit::Add {
            entity: AssocEntity::User,
            name: "Alice".into(),
            fields: AssocFields {
                accounts: Some(vec!["IscrB_SCORE".into(), "nlp".into()]),
                default_account: Some("IscrB_SCORE".into()),
                ..AssocFields::default()
            },
        };
        add.in_slurm_case();
        let AssocEdit::Add { name, fields, .. } = &add else {
            unreachable!()
        };
        assert_eq!(name, "Alice");
        assert_eq!(
            fields.accounts.as_deref(),
            Some(&["iscrb_score".to_string(), "nlp".into()][..])
        );
        assert_eq!(fields.default_account.as_deref(), Some("iscrb_score"));

        let mut qos = AssocEdit::Modify {
            entity: AssocEntity::Qos,
            name: "High".into(),
            fields: AssocFields {
                preempt: Some(vec!["Low".into()]),
                ..AssocFields::default()
            },
        };
        qos.in_slurm_case();
        let AssocEdit::Modify { name, fields, .. } = &qos else {
            unreachable!()
        };
        assert_eq!(
            (name.as_str(), fields.preempt.as_deref()),
            ("high", Some(&["low".to_string()][..]))
        );

        let mut delete = AssocEdit::Delete {
            entity: AssocEntity::User,
            name: "Bob".into(),
            account: Some("ML".into()),
        };
        delete.in_slurm_case();
        assert_eq!(
            delete,
            AssocEdit::Delete {
                entity: AssocEntity::User,
                name: "Bob".into(),
                account: Some("ml".into()),
            }
        );
    }
}

//! What a job asks to be told about (`--mail-type`, `--mail-user`), in sbatch's words.

use serde::{Deserialize, Serialize};

/// One `--mail-type` value.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MailType {
    Begin,
    End,
    Fail,
    Requeue,
    InvalidDepend,
    StageOut,
    TimeLimit,
    #[serde(rename = "TIME_LIMIT_50")]
    TimeLimit50,
    #[serde(rename = "TIME_LIMIT_80")]
    TimeLimit80,
    #[serde(rename = "TIME_LIMIT_90")]
    TimeLimit90,
    /// Each task of an array on its own (else BEGIN, END and FAIL are the array's).
    ArrayTasks,
}

/// `--mail-type` and `--mail-user`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MailRequest {
    pub types: Vec<MailType>,
    /// Whom to tell (absent: the job's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A `--mail-type` value sbatch does not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--mail-type={0}: use NONE, BEGIN, END, FAIL, REQUEUE, ALL, INVALID_DEPEND, STAGE_OUT, TIME_LIMIT, TIME_LIMIT_90, TIME_LIMIT_80, TIME_LIMIT_50 or ARRAY_TASKS, comma separated"
)]
pub struct MailTypeError(pub String);

/// `--mail-type`'s comma list (any case); `NONE` alone is no request.
pub fn parse_mail_types(text: &str) -> Result<Vec<MailType>, MailTypeError> {
    let mut out = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let add: &[MailType] = match word.to_ascii_uppercase().as_str() {
            "NONE" => &[],
            "BEGIN" => &[MailType::Begin],
            "END" => &[MailType::End],
            "FAIL" => &[MailType::Fail],
            "REQUEUE" => &[MailType::Requeue],
            "INVALID_DEPEND" => &[MailType::InvalidDepend],
            "STAGE_OUT" => &[MailType::StageOut],
            "TIME_LIMIT" => &[MailType::TimeLimit],
            "TIME_LIMIT_50" => &[MailType::TimeLimit50],
            "TIME_LIMIT_80" => &[MailType::TimeLimit80],
            "TIME_LIMIT_90" => &[MailType::TimeLimit90],
            "ARRAY_TASKS" => &[MailType::ArrayTasks],
            "ALL" => &[
                MailType::Begin,
                MailType::End,
                MailType::Fail,
                MailType::InvalidDepend,
                MailType::Requeue,
                MailType::StageOut,
            ],
            _ => return Err(MailTypeError(word.to_string())),
        };
        out.extend_from_slice(add);
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_types_read_as_sbatch_reads_them() {
        assert_eq!(
            parse_mail_types("end,FAIL").unwrap(),
            [MailType::End, MailType::Fail]
        );
        assert_eq!(parse_mail_types("ALL").unwrap().len(), 6);
        assert!(parse_mail_types("NONE").unwrap().is_empty());
        assert!(parse_mail_types("END,sometimes").is_err());
        let json = serde_json::to_string(&MailType::TimeLimit80).unwrap();
        assert_eq!(json, "\"TIME_LIMIT_80\"");
    }
}

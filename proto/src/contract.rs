//! Which document each gRPC message carries: one [`Carries`] implementation per message
//! with a JSON `bytes` field, so that the type of what goes into a method's request or
//! reply is fixed by the method, and a mismatch does not compile.
//!
//! ```compile_fail
//! use gsched_proto::contract::Carries;
//! use gsched_proto::pb::ActOnJobsRequest;
//! // A step request is not what ActOnJobs takes:
//! let step: gsched_types::steps::StepRequest = unimplemented!();
//! let _ = ActOnJobsRequest::carrying(&step);
//! ```
//!
//! ```
//! use gsched_proto::contract::Carries;
//! use gsched_proto::pb::ActOnJobsRequest;
//! use gsched_types::api::{JobAction, JobActionRequest};
//! let body = JobActionRequest {
//!     action: JobAction::Signal { signal: 10, batch_only: false },
//!     select: Default::default(),
//! };
//! let req = ActOnJobsRequest::carrying(&body);
//! assert_eq!(req.document().unwrap().action.verb(), "signal");
//! ```

use crate::pb;
use gsched_types::agent::{AgentToController, ControllerToAgent};
use gsched_types::api::{
    ActionSummary, CheckReply, JobActionRequest, JobList, JobRow, NodeList, QueueRow,
    RevokeTokensReply, RevokeTokensRequest, StatusRow, TokenReply, TokenRequest,
};
use gsched_types::job::JobSpec;
use gsched_types::steps::{StepInput, StepRequest, StepUpdate};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A message's document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    #[error("malformed {what}: {source}")]
    Malformed {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("the reply holds no {what}: the controller may be of another version")]
    Missing { what: &'static str },
}

impl From<ContractError> for tonic::Status {
    fn from(e: ContractError) -> tonic::Status {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// A gRPC message that carries one document of `Self::Document`, as JSON.
pub trait Carries: Sized {
    type Document: Serialize + DeserializeOwned;
    /// What the document is, in words, for error messages.
    const WHAT: &'static str;

    /// The message carrying already-encoded JSON (for the REST API, which receives it so).
    fn from_json(json: Vec<u8>) -> Self;

    /// The document's JSON, as carried.
    fn json(&self) -> &[u8];

    fn carrying(doc: &Self::Document) -> Self {
        Self::from_json(serde_json::to_vec(doc).expect("gsched documents serialise"))
    }

    fn document(&self) -> Result<Self::Document, ContractError> {
        serde_json::from_slice(self.json()).map_err(|source| ContractError::Malformed {
            what: Self::WHAT,
            source,
        })
    }
}

macro_rules! carries {
    ($($message:ident { $field:ident $(, $rest:ident)* } => $doc:ty, $what:literal;)*) => {$(
        impl Carries for pb::$message {
            type Document = $doc;
            const WHAT: &'static str = $what;
            fn from_json(json: Vec<u8>) -> Self {
                pb::$message { $field: json $(, $rest: Default::default())* }
            }
            fn json(&self) -> &[u8] {
                &self.$field
            }
        }
    )*};
}

carries! {
    SubmitRequest { json, request_id } => JobSpec, "job spec";
    CheckRequest { json } => JobSpec, "job spec";
    CheckReply { json } => CheckReply, "check reply";
    ListNodesReply { json } => NodeList, "node list";
    StatusReply { json } => StatusRow, "controller status";
    ActOnJobsRequest { json, request_id } => JobActionRequest, "job action";
    ActOnJobsReply { json } => ActionSummary, "action summary";
    RunStepRequest { json } => StepRequest, "step request";
    RunStepReply { json } => StepUpdate, "step update";
    StepInputRequest { json } => StepInput, "step input";
    IssueTokenRequest { json } => TokenRequest, "token request";
    IssueTokenReply { json } => TokenReply, "token reply";
    RevokeTokensRequest { json, request_id } => RevokeTokensRequest, "token revocation";
    RevokeTokensReply { json } => RevokeTokensReply, "token revocation reply";
    ReportRequest { json } => gsched_types::report::ReportRequest, "report request";
    ReportReply { json } => gsched_types::report::ReportReply, "report";
    ReservationsRequest { json, request_id } => gsched_types::reservation::ReservationRequest, "reservation request";
    ReservationsReply { json } => gsched_types::reservation::ReservationReply, "reservation reply";
    AssociationsRequest { json, request_id } => gsched_types::assoc::AssocRequest, "association request";
    AssociationsReply { json } => gsched_types::assoc::AssocReply, "association reply";
    AgentEnvelope { json } => AgentToController, "agent message";
    ControllerEnvelope { json } => ControllerToAgent, "controller message";
}

/// A request whose command is applied once per client-chosen id.
pub trait Idempotent {
    fn with_request_id(self, id: impl Into<String>) -> Self;
}

macro_rules! idempotent {
    ($($message:ident),*) => {$(
        impl Idempotent for pb::$message {
            fn with_request_id(mut self, id: impl Into<String>) -> Self {
                self.request_id = id.into();
                self
            }
        }
    )*};
}

idempotent!(
    SubmitRequest,
    ActOnJobsRequest,
    RevokeTokensRequest,
    ReservationsRequest,
    AssociationsRequest
);

/// One page of `ListJobs`, in the shape the request's `view` asked for.
pub enum JobPage {
    Rows(JobList<JobRow>),
    Queue(JobList<QueueRow>),
}

impl pb::ListJobsReply {
    pub fn rows(page: &JobList<JobRow>) -> pb::ListJobsReply {
        pb::ListJobsReply {
            page: Some(pb::list_jobs_reply::Page::Rows(
                serde_json::to_vec(page).expect("gsched documents serialise"),
            )),
            next_after: Some(page.next_after.map_or(0, |j| j.0)),
        }
    }

    pub fn queue(page: &JobList<QueueRow>) -> pb::ListJobsReply {
        pb::ListJobsReply {
            page: Some(pb::list_jobs_reply::Page::Queue(
                serde_json::to_vec(page).expect("gsched documents serialise"),
            )),
            next_after: Some(page.next_after.map_or(0, |j| j.0)),
        }
    }

    /// The page's JSON, whichever its shape (for the REST API).
    pub fn json(&self) -> &[u8] {
        match &self.page {
            Some(pb::list_jobs_reply::Page::Rows(j) | pb::list_jobs_reply::Page::Queue(j)) => j,
            None => b"",
        }
    }

    pub fn document(&self) -> Result<JobPage, ContractError> {
        fn decode<T: DeserializeOwned>(
            what: &'static str,
            json: &[u8],
        ) -> Result<T, ContractError> {
            serde_json::from_slice(json).map_err(|source| ContractError::Malformed { what, source })
        }
        match &self.page {
            Some(pb::list_jobs_reply::Page::Rows(j)) => decode("job list", j).map(JobPage::Rows),
            Some(pb::list_jobs_reply::Page::Queue(j)) => {
                decode("queue list", j).map(JobPage::Queue)
            }
            None => Err(ContractError::Missing { what: "job list" }),
        }
    }

    /// The page of full rows; an error if the controller sent another shape.
    pub fn job_rows(&self) -> Result<JobList<JobRow>, ContractError> {
        match self.document()? {
            JobPage::Rows(l) => Ok(l),
            JobPage::Queue(_) => Err(ContractError::Missing { what: "job rows" }),
        }
    }

    /// The page of queue rows; an error if the controller sent another shape.
    pub fn queue_rows(&self) -> Result<JobList<QueueRow>, ContractError> {
        match self.document()? {
            JobPage::Queue(l) => Ok(l),
            JobPage::Rows(_) => Err(ContractError::Missing { what: "queue rows" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_survives_its_message() {
        let body = JobActionRequest {
            action: gsched_types::api::JobAction::Update {
                time_limit_s: Some(60),
            },
            select: Default::default(),
        };
        let req = pb::ActOnJobsRequest::carrying(&body).with_request_id("r1");
        assert_eq!(req.request_id, "r1");
        assert_eq!(req.document().unwrap(), body);
        // As the JSON of clients from before an action carried values reads.
        let old = pb::ActOnJobsRequest::from_json(
            br#"{"action": "cancel", "select": {"jobs": [{"id": 7}]}}"#.to_vec(),
        );
        assert_eq!(
            old.document().unwrap().action,
            gsched_types::api::JobAction::Cancel
        );
    }

    #[test]
    fn a_malformed_document_names_what_it_should_be() {
        let req = pb::ActOnJobsRequest::from_json(
            b"{\"action\": {\"signal\": {\"signal\": \"ten\"}}}".to_vec(),
        );
        let e = req.document().unwrap_err().to_string();
        assert!(e.starts_with("malformed job action: "), "{e}");
    }

    #[test]
    fn a_page_of_the_wrong_shape_is_an_error_not_a_guess() {
        let page = JobList::<QueueRow> {
            jobs: vec![],
            applied_index: 3,
            controller: 1,
            role: Default::default(),
            consistent: true,
            now_ms: 0,
            next_after: None,
        };
        let reply = pb::ListJobsReply::queue(&page);
        assert_eq!(reply.queue_rows().unwrap().applied_index, 3);
        assert_eq!(
            reply.next_after,
            Some(0),
            "the last page says so outside its JSON"
        );
        let more = JobList {
            next_after: Some(gsched_types::job::JobId(7)),
            ..page
        };
        assert_eq!(pb::ListJobsReply::queue(&more).next_after, Some(7));
        assert!(reply.job_rows().is_err());
        assert!(pb::ListJobsReply::default().document().is_err());
    }
}

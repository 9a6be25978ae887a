//! The OpenAPI document of the HTTP API (`GET /api/v1/openapi.json`, and
//! `docs/openapi.json`): every route `http.rs` serves, with request and response schemas
//! generated from the same `gsched_types` the handlers decode and encode (schemars).

use gsched_types::api::{ActionSummary, JobActionRequest, JobList, JobRow, NodeList};
use gsched_types::job::JobSpec;
use gsched_types::usage::Efficiency;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

/// The document, built on first use.
pub fn document() -> &'static Value {
    static DOC: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    DOC.get_or_init(build)
}

/// The API's types as JSON schemas (references into `definitions`), generated from the
/// types the handlers decode and encode.
struct Schemas {
    job_list: Value,
    job_row: Value,
    node_list: Value,
    job_spec: Value,
    action: Value,
    summary: Value,
    efficiency: Value,
    definitions: serde_json::Map<String, Value>,
}

fn schemas() -> Schemas {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let of = |schema: schemars::Schema| serde_json::to_value(schema).unwrap_or_default();
    let job_list = of(generator.subschema_for::<JobList>());
    let job_row = of(generator.subschema_for::<JobRow>());
    let node_list = of(generator.subschema_for::<NodeList>());
    let job_spec = of(generator.subschema_for::<JobSpec>());
    let action = of(generator.subschema_for::<JobActionRequest>());
    let summary = of(generator.subschema_for::<ActionSummary>());
    let efficiency = of(generator.subschema_for::<Efficiency>());
    Schemas {
        job_list,
        job_row,
        node_list,
        job_spec,
        action,
        summary,
        efficiency,
        definitions: generator.take_definitions(true),
    }
}

fn build() -> Value {
    let s = schemas();
    let mut components = s.definitions.clone();
    components.insert(
        "Error".into(),
        json!({"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}),
    );
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "gsched REST API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Served by gctld --http. Callers: Authorization: Bearer <gctl token>, else the socket's owner on a --dev-local cluster, else a MUNGE credential in X-Gsched-Munge. Writes follow the CLI's rules for the same caller."
        },
        "security": [{"bearer": []}, {"munge": []}],
        "paths": paths(s),
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "gctl token"},
                "munge": {"type": "apiKey", "in": "header", "name": "X-Gsched-Munge", "description": "a fresh MUNGE credential per request"}
            }
        }
    })
}

/// Every route `http.rs` serves, with its parameters, body and answers.
fn paths(s: Schemas) -> Value {
    let Schemas {
        job_list,
        job_row,
        node_list,
        job_spec,
        action,
        summary,
        efficiency,
        ..
    } = s;
    let mut example = JobSpec::simple("train", "alice", "#!/bin/bash\nhostname\n");
    example.gpus_per_node = 1;
    example.workdir = "/home/alice".into();
    let spec_example = serde_json::to_value(&example).unwrap_or_default();
    let error = json!({"description": "refused; the message says why", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let ok = |description: &str, s: &Value| json!({"description": description, "content": {"application/json": {"schema": s}}});
    let key = json!({"name": "Idempotency-Key", "in": "header", "required": false, "schema": {"type": "string", "maxLength": 128}, "description": "a retried write with the same key (same caller, same kind of request) is applied once"});
    let id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}, "description": "123, or 120_3 for a task of array 120"});
    let errors = |code: &[&str]| -> Value {
        code.iter()
            .map(|c| (c.to_string(), error.clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let with = |mut responses: Value, extra: Value| {
        if let (Some(r), Some(e)) = (responses.as_object_mut(), extra.as_object()) {
            r.extend(e.clone());
        }
        responses
    };
    let query = |name: &str, description: &str| json!({"name": name, "in": "query", "required": false, "schema": {"type": "string"}, "description": description});
    json!({
        "/api/v1/jobs": {
            "get": {
                "summary": "Jobs, as gqueue --json lists them (others' jobs as summaries)",
                "parameters": [
                    query("user", "comma-separated users"),
                    query("state", "comma-separated states (PD,R,... or names)"),
                    query("all", "1: finished jobs too"),
                    query("detail", "1: allocation, steps, attempts, and the spec of your own jobs"),
                    {"name": "after", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0}, "description": "the next page after this job id (next_after)"}
                ],
                "responses": with(json!({"200": ok("a page of jobs", &job_list)}), errors(&["400", "401"]))
            },
            "post": {
                "summary": "Submit a job (as gRPC Submit): it runs as the verified caller",
                "parameters": [key.clone()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": job_spec, "example": spec_example}}},
                "responses": with(json!({"201": ok("submitted", &json!({"type": "object", "required": ["job_ids"], "properties": {"job_ids": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}))}), errors(&["400", "401", "403"]))
            }
        },
        "/api/v1/jobs/actions": {
            "post": {
                "summary": "Cancel, hold, release, requeue, update or signal every job a selection names (as gcancel -u); an array's tasks change all or none, and jobs whose state refuses the action are reported one by one",
                "parameters": [key.clone()],
                "requestBody": {"required": true, "content": {"application/json": {"schema": action, "example": {"action": "cancel", "select": {"users": ["alice"], "states": ["PENDING"]}}}}},
                "responses": with(json!({"200": ok("what was done and refused", &summary)}), errors(&["400", "401", "403"]))
            }
        },
        "/api/v1/jobs/{id}": {
            "get": {
                "summary": "One job, detailed (others' jobs as summaries)",
                "parameters": [id.clone()],
                "responses": with(json!({"200": ok("the job", &job_row)}), errors(&["400", "401", "404"]))
            }
        },
        "/api/v1/jobs/{id}/efficiency": {
            "get": {
                "summary": "The job's efficiency report, as gacct --eff --json: per GPU mean and max utilisation, memory, idle share and series; per node CPU and memory; advice",
                "parameters": [id.clone()],
                "responses": with(json!({"200": ok("the report", &efficiency)}), errors(&["400", "401", "404"]))
            }
        },
        "/api/v1/jobs/{id}/{action}": {
            "post": {
                "summary": "Cancel, hold, release or requeue one job",
                "parameters": [id, {"name": "action", "in": "path", "required": true, "schema": {"type": "string", "enum": ["cancel", "hold", "release", "requeue"]}}, key.clone()],
                "responses": with(json!({"200": ok("what was done and refused", &summary)}), errors(&["400", "401", "403", "404"]))
            }
        },
        "/api/v1/nodes": {
            "get": {
                "summary": "Nodes with their wiring, as ginfo --json",
                "responses": with(json!({"200": ok("the nodes", &node_list)}), errors(&["401"]))
            }
        },
        "/api/v1/nodes/{name}/{action}": {
            "post": {
                "summary": "Drain (with a reason) or resume a node: admins only",
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "action", "in": "path", "required": true, "schema": {"type": "string", "enum": ["drain", "resume"]}},
                    key
                ],
                "requestBody": {"required": false, "content": {"application/json": {"schema": {"type": "object", "properties": {"reason": {"type": "string"}}}}}},
                "responses": with(json!({"200": ok("done", &json!({"type": "object", "properties": {"message": {"type": "string"}}}))}), errors(&["400", "401", "403", "404"]))
            }
        },
        "/api/v1/openapi.json": {
            "get": {"summary": "This document", "security": [], "responses": {"200": {"description": "OpenAPI 3.0"}}}
        }
    })
}

#[cfg(test)]
mod tests {
    /// `docs/openapi.json` is this build's document (regenerate it with
    /// `GSCHED_UPDATE_OPENAPI=1 cargo test -p gsched-controller openapi`).
    #[test]
    fn the_committed_openapi_document_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        let text = serde_json::to_string_pretty(super::document()).unwrap() + "\n";
        if std::env::var_os("GSCHED_UPDATE_OPENAPI").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == text,
            "docs/openapi.json is stale: GSCHED_UPDATE_OPENAPI=1 cargo test -p gsched-controller openapi"
        );
    }
}

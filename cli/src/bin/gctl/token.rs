//! `gctl token` (scontrol token): bearer tokens for the HTTP API, and their revocation.

use clap::Subcommand;
use gsched_cli::client::{Client, describe, die, request_id};
use gsched_cli::outln;
use gsched_proto::contract::{Carries, Idempotent};
use gsched_proto::pb;

#[derive(Subcommand, Debug)]
pub enum TokenAction {
    /// Revoke the tokens issued so far: yours, a user's (--user, admins) or everyone's
    /// (--all, admins). Tokens issued afterwards work.
    Revoke {
        #[arg(long, short = 'u')]
        user: Option<String>,
        #[arg(long, conflicts_with = "user")]
        all: bool,
    },
}

pub fn revoke(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    user: Option<String>,
    all: bool,
    json: bool,
) {
    let req =
        pb::RevokeTokensRequest::carrying(&gsched_types::api::RevokeTokensRequest { user, all })
            .with_request_id(request_id());
    let reply = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.revoke_tokens(req).await }
        }))
        .unwrap_or_else(|s| die("gctl", describe(&s)));
    let done = gsched_cli::doc_of(&reply, "gctl");
    if json {
        gsched_cli::print_json(&done);
    } else {
        outln!(
            "tokens of {} issued before {} are revoked",
            done.user.as_deref().unwrap_or("every user"),
            gsched_types::parse::format_timestamp(done.revoked_before_ms)
        );
    }
}

pub fn issue(rt: &tokio::runtime::Runtime, client: &mut Client, lifetime: &str, json: bool) {
    let lifetime_s = match lifetime.parse::<u64>() {
        Ok(seconds) => seconds,
        Err(_) => gsched_types::parse::time_limit(lifetime)
            .unwrap_or_else(|e| die("gctl", format!("--lifetime {lifetime}: {e}")))
            .unwrap_or(gsched_types::api::MAX_TOKEN_LIFETIME_S),
    };
    let req = pb::IssueTokenRequest::carrying(&gsched_types::api::TokenRequest { lifetime_s });
    let reply = rt
        .block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.issue_token(req).await }
        }))
        .unwrap_or_else(|s| die("gctl", describe(&s)));
    let token = gsched_cli::doc_of(&reply, "gctl");
    if json {
        gsched_cli::print_json(&token);
    } else {
        outln!("GSCHED_TOKEN={}", token.token);
        eprintln!(
            "gctl: a token for {} until {}",
            token.user,
            gsched_types::parse::format_timestamp(token.expires_ms)
        );
    }
}

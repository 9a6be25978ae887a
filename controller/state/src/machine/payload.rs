//! What a submission carries that its jobs share: the batch script and the environment.
//! Stored once per submission (an array of a thousand tasks holds one script, not a
//! thousand), kept out of the job records the scheduler and the readers walk, and dropped
//! when the last of its jobs has ended. The texts themselves are [`Blobs`]: compressed,
//! and kept once however many submissions carry the same one (a loop of `gsub` from one
//! shell sends the same environment every time).

use super::Shared;
use base64::Engine;
use gsched_types::job::{JobId, JobRecord, JobSpec};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// A submission's script and environment, by the blobs that hold them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Payload {
    pub script: BlobId,
    pub env: BlobId,
    /// Jobs of the submission that have not ended.
    pub live: u32,
}

/// A blob's name: the first 16 bytes of the SHA-256 of its text, in hex.
pub type BlobId = String;

/// Compressed bytes (LZ4), written as base64 in snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed(Box<[u8]>);

impl Packed {
    fn pack(text: &[u8]) -> Packed {
        Packed(lz4_flex::compress_prepend_size(text).into_boxed_slice())
    }

    fn unpack(&self) -> Vec<u8> {
        // A blob is only ever made by `pack`; a corrupt one reads as empty.
        lz4_flex::decompress_size_prepended(&self.0).unwrap_or_default()
    }
}

impl Serialize for Packed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Packed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(|b| Packed(b.into_boxed_slice()))
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Blob {
    pub data: Packed,
    /// Payloads that name it.
    pub refs: u32,
}

/// Every distinct script and environment text of live submissions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Blobs(BTreeMap<BlobId, Blob>);

impl Blobs {
    /// Keeps `text` (once) and returns its name.
    fn intern(&mut self, text: &[u8]) -> BlobId {
        let id: BlobId = Sha256::digest(text)
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        self.0
            .entry(id.clone())
            .and_modify(|b| b.refs += 1)
            .or_insert_with(|| Blob {
                data: Packed::pack(text),
                refs: 1,
            });
        id
    }

    fn get(&self, id: &str) -> Vec<u8> {
        self.0.get(id).map(|b| b.data.unpack()).unwrap_or_default()
    }

    fn drop_ref(&mut self, id: &str) {
        if let Some(b) = self.0.get_mut(id) {
            b.refs = b.refs.saturating_sub(1);
            if b.refs == 0 {
                self.0.remove(id);
            }
        }
    }

    /// Distinct texts held, and their compressed bytes.
    pub fn footprint(&self) -> (usize, usize) {
        (self.0.len(), self.0.values().map(|b| b.data.0.len()).sum())
    }
}

/// The payload a job's script and environment are kept under: its array's, or its own.
pub fn key_of(job: &JobRecord) -> JobId {
    job.array_task.map(|t| t.array_job_id).unwrap_or(job.id)
}

/// Moves the script and environment out of `spec` into a payload for `live` jobs.
pub fn take(spec: &mut JobSpec, live: u32, blobs: &mut Blobs) -> Payload {
    let script = std::mem::take(&mut spec.script);
    let env = std::mem::take(&mut spec.env);
    let env = serde_json::to_vec(&env).expect("an environment serialises");
    Payload {
        script: blobs.intern(script.as_bytes()),
        env: blobs.intern(&env),
        live,
    }
}

/// `spec` with its payload put back (what an agent needs to run the job).
pub fn restore(spec: &JobSpec, payload: Option<&Payload>, blobs: &Blobs) -> JobSpec {
    let mut full = spec.clone();
    if let Some(p) = payload {
        full.script = String::from_utf8(blobs.get(&p.script)).unwrap_or_default();
        full.env = serde_json::from_slice(&blobs.get(&p.env)).unwrap_or_default();
    }
    full
}

/// One job of payload `key` ended: drops the payload, and texts no payload names any
/// more, with its last job.
pub fn release(payloads: &mut BTreeMap<JobId, Shared<Payload>>, blobs: &mut Blobs, key: JobId) {
    if let Some(p) = payloads.get_mut(&key) {
        p.live = p.live.saturating_sub(1);
        if p.live == 0
            && let Some(p) = payloads.remove(&key)
        {
            blobs.drop_ref(&p.script);
            blobs.drop_ref(&p.env);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_are_kept_once_and_dropped_with_their_last_payload() {
        let mut blobs = Blobs::default();
        let mut payloads = BTreeMap::new();
        let mut a = JobSpec::simple("a", "u", "#!/bin/sh\necho hi\n");
        a.env.insert("PATH".into(), "/usr/bin".into());
        let b = a.clone();
        let (pa, pb) = (
            take(&mut a.clone(), 1, &mut blobs),
            take(&mut b.clone(), 2, &mut blobs),
        );
        assert_eq!(blobs.footprint().0, 2, "one script, one environment");
        let full = restore(&JobSpec::simple("a", "u", ""), Some(&pb), &blobs);
        assert_eq!(
            (full.script.as_str(), full.env.len()),
            ("#!/bin/sh\necho hi\n", 1)
        );
        payloads.insert(JobId(1), Shared::new(pa));
        payloads.insert(JobId(2), Shared::new(pb));
        release(&mut payloads, &mut blobs, JobId(1));
        assert_eq!(blobs.footprint().0, 2, "job 2's payload still names them");
        release(&mut payloads, &mut blobs, JobId(2));
        release(&mut payloads, &mut blobs, JobId(2));
        assert!(payloads.is_empty());
        assert_eq!(blobs.footprint(), (0, 0));
        let json = serde_json::to_string(&Packed::pack(b"abc")).unwrap();
        assert_eq!(
            serde_json::from_str::<Packed>(&json).unwrap().unpack(),
            b"abc"
        );
    }
}

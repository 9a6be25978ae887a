//! Fake topologies: the discovery JSON schema (the same document `gagentd discover --json`
//! prints), TOML with the same fields, or a saved `nvidia-smi topo -m` text. This is how a
//! node without GPUs pretends to have them, and how a real node's discovery is replayed
//! anywhere.

use gsched_types::topology::{Topology, TopologyError};

/// Why a topology file or text cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FakeTopologyError {
    #[error("topology file {origin}: {source}")]
    File {
        origin: String,
        source: Box<FakeTopologyError>,
    },
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error(transparent)]
    Matrix(#[from] crate::topo_matrix::TopoParseError),
    #[error(transparent)]
    Invalid(#[from] TopologyError),
}

/// Parses and validates the text of a topology file named `origin` (its source becomes
/// `fake:ORIGIN`). The format is chosen by content: a JSON object, `nvidia-smi topo -m`
/// text (a header with `GPU0`), or TOML.
pub fn parse_topology_file(text: &str, origin: &str) -> Result<Topology, FakeTopologyError> {
    let mut topo = parse_topology_text(text).map_err(|e| FakeTopologyError::File {
        origin: origin.to_string(),
        source: Box::new(e),
    })?;
    topo.source = format!("fake:{origin}");
    Ok(topo)
}

/// Parses topology text in any accepted format and validates it.
pub fn parse_topology_text(text: &str) -> Result<Topology, FakeTopologyError> {
    let body = crate::strip_fixture_header(text);
    let trimmed = body.trim_start();
    let topo: Topology = if trimmed.starts_with('{') {
        serde_json::from_str(trimmed)?
    } else if body.contains("GPU0") && !trimmed.starts_with('[') && !body.contains("gpu_links") {
        crate::parse_topo_matrix(body)?
    } else {
        toml::from_str(body)?
    };
    topo.validate()?;
    Ok(topo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_shapes_with_a_message() {
        let err =
            parse_topology_text(r#"{"gpus":[{"index":0}],"gpu_links":[["X","NV4"]]}"#).unwrap_err();
        assert!(matches!(err, FakeTopologyError::Invalid(_)), "{err}");
        assert!(err.to_string().contains("1x1"), "{err}");
        let err = parse_topology_text("{not json").unwrap_err();
        assert!(matches!(err, FakeTopologyError::Json(_)), "{err}");
    }

    #[test]
    fn json_round_trip() {
        let text = r#"{"gpus":[{"index":0,"numa_node":0,"cpus":"0-3"},{"index":1,"numa_node":null}],"gpu_links":[["X","NV4"],["NV4","X"]]}"#;
        let t = parse_topology_text(text).unwrap();
        assert_eq!(t.gpus.len(), 2);
        assert_eq!(t.gpus[1].numa_node, None);
        let again = parse_topology_text(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(again.gpu_links, t.gpu_links);
    }
}

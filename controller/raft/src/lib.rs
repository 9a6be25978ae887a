//! gsched-raft

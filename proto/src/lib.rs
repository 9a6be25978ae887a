//! gsched-proto

//! gsched-cli

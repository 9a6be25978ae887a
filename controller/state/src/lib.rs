//! gsched-state

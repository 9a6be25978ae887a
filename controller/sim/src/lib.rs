//! gsched-sim

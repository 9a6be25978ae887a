//! gsched-controller

//! gsched-launch

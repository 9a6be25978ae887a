//! gsched-agent

# /etc/profile.d/gsched.sh on a one-server deployment: the tools reach the controller's
# Unix socket (also their default when /run/gsched/gctld.sock exists).
export GSCHED_CONTROLLERS=unix:/run/gsched/gctld.sock

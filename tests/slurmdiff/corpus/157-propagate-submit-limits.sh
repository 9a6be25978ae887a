#!/bin/bash
# source: Slurm sbatch and srun man pages (--propagate) and slurm.conf(5) (PropagateResourceLimits=ALL by default): a job and its steps run with the submitting shell's soft limits
# driver: yes
cat > limits.sbatch <<'EOS'
#!/bin/bash
#SBATCH -o limits-%j.out
echo "batch nofile=$(ulimit -n) stack=$(ulimit -s)"
srun -n1 bash -c 'echo "step nofile=$(ulimit -n) stack=$(ulimit -s)"'
echo "variables left: $(env | grep -c '^SLURM_RLIMIT_')"
EOS
cat > asked.sbatch <<'EOS'
#!/bin/bash
#SBATCH -o asked-%j.out
#SBATCH --propagate=NOFILE
echo "asked nofile=$(ulimit -n)"
EOS
(ulimit -S -n 777; ulimit -S -s 4096; sbatch --wait limits.sbatch)
(ulimit -S -n 555; sbatch --wait asked.sbatch)
echo "done $?"

#!/bin/bash
# source: Slurm sbatch man page, --comment, --wckey and -F/--nodefile (a node file written by an earlier pipeline stage)
# driver: yes
printf 'n2\n' > nodes.txt
cat > job.sbatch <<'EOS'
#!/bin/bash
#SBATCH --comment="sweep 7 of 12"
#SBATCH --wckey=projA
#SBATCH --nodefile=nodes.txt
#SBATCH -o nodefile-%j.out
echo "on $SLURMD_NODENAME nodes=$SLURM_JOB_NODELIST"
python probe.py
EOS
jid=$(sbatch --parsable --wait job.sbatch)
echo "done $?"
scontrol show job "$jid" | grep -o "Comment=[^ ]* [^ ]* [^ ]*"

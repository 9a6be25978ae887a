#!/bin/bash
# source: Slurm sbatch man page, --dependency=afterany / afternotok (a cleanup job after a failing one)
# driver: yes
cat > bad.sbatch <<'EOF'
#!/bin/bash
#SBATCH -o bad-%j.out
echo failing; exit 2
EOF
cat > cleanup.sbatch <<'EOF'
#!/bin/bash
#SBATCH -o cleanup-%j.out
echo cleanup ran
EOF
jid=$(sbatch --parsable bad.sbatch)
echo "Submitted batch job $jid"
sbatch --wait --dependency=afternotok:$jid cleanup.sbatch
echo "cleanup exit $?"

#!/bin/bash
# source: Slurm sbatch man page, --dependency=afterok and --parsable (pipeline of preprocess -> train)
# driver: yes
cat > prep.sbatch <<'EOF'
#!/bin/bash
#SBATCH -o prep-%j.out
echo prep
EOF
cat > fit.sbatch <<'EOF'
#!/bin/bash
#SBATCH -o fit-%j.out
#SBATCH --gres=gpu:1
echo "fit after prep"
EOF
jid=$(sbatch --parsable prep.sbatch)
echo "Submitted batch job $jid"
sbatch --wait --dependency=afterok:$jid fit.sbatch
echo "pipeline exit $?"

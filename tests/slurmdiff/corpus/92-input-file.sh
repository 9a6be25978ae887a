#!/bin/bash
# source: Slurm sbatch man page, -i/--input (the batch script's stdin from a file; without it, /dev/null)
# driver: yes
printf 'line one\nline two\n' > input-data.txt
cat > job.sbatch <<'EOS'
#!/bin/bash
#SBATCH -i input-data.txt
#SBATCH -o input.out
echo "lines on stdin: $(wc -l)"
EOS
sbatch --wait job.sbatch > /dev/null
echo "with input: $?"
sbatch --wait -o no-input.out --wrap 'echo "lines on stdin: $(wc -l)"' > /dev/null
echo "without: $?"

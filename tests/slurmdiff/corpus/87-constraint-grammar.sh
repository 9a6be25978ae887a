#!/bin/bash
# source: Slurm sbatch man page, -C/--constraint: AND (&), OR (|), matching OR ([a|b]), node counts (name*N)
# driver: yes
for c in "ib" "rack2" "rack1|rack2" "rack2&ib" "ib*2" "[rack1|rack2]" "(rack1|rack2)&ib"; do
    for n in 1 2; do
        safe=$(printf '%s' "$c" | tr -c 'a-z0-9' '_')
        sbatch --wait -N "$n" -C "$c" -o "c-$safe-$n.out" --wrap 'echo "$SLURM_JOB_NODELIST"' >/dev/null 2>&1
        echo "-N $n -C $c: rc=$?"
    done
done

#!/usr/bin/env python3
"""Regenerates the facts columns of Slurm's option tables from Slurm's own source.

    cli/slurm-options/generate.py SLURM_SOURCE_DIR   (a checkout of SchedMD/slurm at
                                                      tag slurm-22-05-8-1)

Reads the submission tools' shared table (src/common/slurm_opt.c: each option's long
name, short letter, whether it takes a value, and which of sbatch/srun/salloc accept
it), the input environment variables each of them reads (src/{sbatch,salloc}/opt.c,
src/srun/libsrun/opt.c: `env_vars[]`) and the getopt tables of squeue, sacct, sinfo,
scancel and scontrol. Writes one TSV per tool next to this script, keeping the
`status` and `note` columns of rows that were there (a row Slurm no longer has is
dropped and reported; a new one gets status `?`, which the option-table test refuses).
"""
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ["option", "short", "arg", "env", "status", "note"]
ARG = {"no_argument": "none", "required_argument": "required",
       "optional_argument": "optional", "0": "none", "1": "required", "2": "optional"}


def common_options(src):
    """{tool: {long: (short, arg)}} for sbatch, srun and salloc."""
    text = (src / "src/common/slurm_opt.c").read_text()
    out = {"sbatch": {}, "srun": {}, "salloc": {}}
    vals = {}
    for m in re.finditer(r"static slurm_cli_opt_t slurm_opt_\w+ = \{(.*?)\n\};", text, re.S):
        body = m.group(1)
        name = re.search(r"\.name = (NULL|\"([^\"]+)\")", body)
        if not name or name.group(1) == "NULL":
            continue
        long = name.group(2)
        has_arg = re.search(r"\.has_arg = (\w+)", body).group(1)
        val = re.search(r"\.val = ('(.)'|\w+)", body)
        short = val.group(2) if val and val.group(2) else ""
        if val:
            vals[val.group(1)] = long
        tools = []
        if re.search(r"\.set_func = ", body):
            tools = ["sbatch", "srun", "salloc"]
        for t in ("sbatch", "srun", "salloc"):
            if re.search(rf"\.set_func_{t} = ", body):
                tools.append(t)
        for t in tools:
            out[t][long] = (short, ARG[has_arg])
    return out, vals


def env_table(path, vals):
    """{long option: [VAR...]} from a tool's env_vars[] table."""
    text = path.read_text()
    m = re.search(r"env_vars_t env_vars\[\] = \{(.*?)\n\};", text, re.S)
    out = {}
    for var, val in re.findall(r"\{\s*\"(\w+)\",\s*('.'|\w+)", m.group(1)):
        long = vals.get(val)
        if long:
            out.setdefault(long, []).append(var)
    return out


def getopt_table(path):
    """{long: (short, arg)} from a `struct option long_options[]` table."""
    text = path.read_text()
    m = re.search(r"struct option long_options\[\] = \{(.*?)\{\s*(?:0|NULL)\s*,[^}]*\}\s*\};", text, re.S)
    out = {}
    for long, has_arg, val in re.findall(
            r"\{\s*\"([\w-]+)\",\s*(\w+),\s*\w+,\s*('.'|\w+)\s*\}", m.group(1)):
        short = val[1] if val.startswith("'") else ""
        out[long] = (short, ARG[has_arg])
    return out


def read_tsv(path):
    rows = {}
    if path.exists():
        lines = path.read_text().splitlines()
        for line in lines[1:]:
            if line and not line.startswith("#"):
                cells = line.split("\t")
                rows[cells[0]] = dict(zip(COLUMNS, cells + [""] * len(COLUMNS)))
    return rows


def write(tool, facts, env):
    path = HERE / f"{tool}.tsv"
    old = read_tsv(path)
    for gone in sorted(set(old) - set(facts)):
        print(f"{tool}: --{gone} is no longer in Slurm's table (row dropped)")
    lines = ["\t".join(COLUMNS)]
    for long in sorted(facts):
        short, arg = facts[long]
        keep = old.get(long, {})
        status = keep.get("status") or "?"
        if status == "?":
            print(f"{tool}: --{long} is new: give it a status")
        lines.append("\t".join([long, short, arg, ",".join(env.get(long, [])),
                                status, keep.get("note", "")]))
    path.write_text("\n".join(lines) + "\n")


def main():
    src = Path(sys.argv[1])
    common, vals = common_options(src)
    envs = {
        "sbatch": env_table(src / "src/sbatch/opt.c", vals),
        "salloc": env_table(src / "src/salloc/opt.c", vals),
        "srun": env_table(src / "src/srun/libsrun/opt.c", vals),
    }
    for tool in ("sbatch", "srun", "salloc"):
        write(tool, common[tool], envs[tool])
    for tool, rel in [("squeue", "src/squeue/opts.c"), ("sacct", "src/sacct/options.c"),
                      ("sinfo", "src/sinfo/opts.c"), ("scancel", "src/scancel/opt.c"),
                      ("scontrol", "src/scontrol/scontrol.c")]:
        write(tool, getopt_table(src / rel), {})


if __name__ == "__main__":
    main()

//! `grun`: srun's twin (see `gsched_cli::grun`).

fn main() {
    let raw = gsched_cli::text_args("grun");
    std::process::exit(gsched_cli::grun::run::main(raw));
}

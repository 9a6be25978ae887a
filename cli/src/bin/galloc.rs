//! `galloc`: salloc's twin (see `gsched_cli::galloc`).

fn main() {
    let raw = gsched_cli::text_args("galloc");
    std::process::exit(gsched_cli::galloc::main(raw));
}

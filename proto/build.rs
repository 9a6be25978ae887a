//! Compiles the .proto with protox (pure Rust), so a plain `cargo build` needs no protoc.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=schema");
    let fds = protox::compile(["gsched.proto"], ["schema"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}

//! Random and malformed inputs for the fuzzers (`gsched-livefuzz` over gRPC,
//! `tests/httpfuzz.rs` over HTTP): strings that hurt (empty, huge, control characters,
//! paths, format strings, other scripts), numbers at the edges, any JSON value, and
//! mutations of a valid document.

use rand::Rng;
use rand::rngs::SmallRng;
use serde_json::{Value, json};

pub fn junk_string(rng: &mut SmallRng) -> String {
    match rng.gen_range(0..12) {
        0 => String::new(),
        1 => "x".repeat(rng.gen_range(1_000..2_000_000)),
        2 => "a\nb\tc\0d\r\u{1b}[31m".repeat(rng.gen_range(1..50)),
        3 => "../../../etc/passwd".into(),
        4 => "%s%n%x{}{{}}$(id)`id`;rm -rf /".into(),
        5 => u64::MAX.to_string(),
        6 => "-1".into(),
        7 => "名前🚀\u{202e}ʇxǝʇ".repeat(rng.gen_range(1..200)),
        8 => "root".into(),
        9 => "0-999999999:1%1000000".into(),
        10 => (0..rng.gen_range(1..64))
            .map(|_| rng.gen_range(b' '..=b'~') as char)
            .collect(),
        _ => "n1".into(),
    }
}

pub fn junk_bytes(rng: &mut SmallRng) -> Vec<u8> {
    let n = match rng.gen_range(0..6) {
        0 => 0,
        1 => rng.gen_range(1_000_000..3_000_000),
        _ => rng.gen_range(1..512),
    };
    (0..n).map(|_| rng.r#gen()).collect()
}

pub fn junk_number(rng: &mut SmallRng) -> Value {
    match rng.gen_range(0..10) {
        8 => json!(1u64 << 31),
        9 => json!(1u64 << 32),
        0 => json!(0),
        1 => json!(u32::MAX),
        2 => json!(u64::MAX),
        3 => json!(-1),
        4 => json!(1e308),
        5 => json!(i64::MIN),
        6 => json!(u32::MAX as u64 + 1),
        _ => json!(rng.gen_range(0..100)),
    }
}

/// Any JSON value at all, up to a small depth.
pub fn junk_value(rng: &mut SmallRng, depth: u32) -> Value {
    match rng.gen_range(0..if depth > 2 { 4 } else { 7 }) {
        0 => Value::Null,
        1 => json!(rng.gen_bool(0.5)),
        2 => junk_number(rng),
        3 => json!(junk_string(rng)),
        4 => Value::Array({
            let n = if rng.gen_bool(0.1) { 100_000 } else { 5 };
            (0..rng.gen_range(0..n)).map(|_| junk_number(rng)).collect()
        }),
        5 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| junk_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.gen_range(0..4))
                .map(|_| {
                    (
                        junk_string(rng).chars().take(20).collect(),
                        junk_value(rng, depth + 1),
                    )
                })
                .collect(),
        ),
    }
}

/// Replaces, removes or retypes one to three fields somewhere in `v`.
pub fn mutate(v: &mut Value, rng: &mut SmallRng) {
    for _ in 0..rng.gen_range(1..=3) {
        mutate_once(v, rng);
    }
}

fn mutate_once(v: &mut Value, rng: &mut SmallRng) {
    let descend = rng.gen_bool(0.5);
    match v {
        Value::Object(m) if !m.is_empty() => {
            let k = m.keys().nth(rng.gen_range(0..m.len())).cloned().unwrap();
            if descend && (m[&k].is_object() || m[&k].is_array()) {
                return mutate_once(m.get_mut(&k).unwrap(), rng);
            }
            match rng.gen_range(0..5) {
                0 => {
                    m.remove(&k);
                }
                1 => {
                    m.insert(k, junk_number(rng));
                }
                2 => {
                    m.insert(k, json!(junk_string(rng)));
                }
                _ => {
                    m.insert(k, junk_value(rng, 0));
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = rng.gen_range(0..a.len());
            if descend {
                return mutate_once(&mut a[i], rng);
            }
            a[i] = junk_value(rng, 0);
        }
        other => *other = junk_value(rng, 0),
    }
}

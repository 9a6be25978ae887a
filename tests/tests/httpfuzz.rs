//! Random and malformed requests against every HTTP endpoint of a running controller
//! (`/`, `/metrics`, the REST reads and writes): odd methods, made-up and hostile paths
//! and ids, junk queries, mangled job specs and actions, bodies from empty to 3 MB, bad
//! tokens and idempotency keys. No request may get a 5xx or a dropped connection, and
//! afterwards the controller still answers and runs a real job.
//! `GSCHED_HTTP_FUZZ_N` sets the number of requests (default 1,500).

use gsched_tests::junk::{junk_value, mutate};
use gsched_tests::{Cluster, free_port, http, success_stdout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

/// A path-safe hostile word for ids, names and query values.
fn word(rng: &mut SmallRng) -> String {
    match rng.gen_range(0..9) {
        0 => String::new(),
        1 => "x".repeat(rng.gen_range(1..5_000)),
        2 => "../../etc/passwd".into(),
        3 => "%00%ff%2e%2e".into(),
        4 => u64::MAX.to_string(),
        5 => "-1".into(),
        6 => "名前🚀".into(),
        7 => "120_3".into(),
        _ => (0..rng.gen_range(1..20))
            .map(|_| rng.gen_range(b'a'..=b'z') as char)
            .collect(),
    }
}

/// How many requests (`GSCHED_HTTP_FUZZ_N`, default 1,500) and the generator, seeded by
/// `GSCHED_FUZZ_SEED` or else `seed`.
fn fuzz_run(seed: u64) -> (u64, SmallRng) {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let n = var("GSCHED_HTTP_FUZZ_N").unwrap_or(1_500);
    (
        n,
        SmallRng::seed_from_u64(var("GSCHED_FUZZ_SEED").unwrap_or(seed)),
    )
}

/// A request whose response must not be a server error; returns its status.
fn fuzz_request(
    i: u64,
    addr: &str,
    method: &str,
    path: &str,
    headers: &str,
    body: &[u8],
) -> String {
    let resp = http::request(addr, method, path, headers, body);
    let status = http::status(&resp).to_string();
    assert!(
        !status.is_empty(),
        "request {i} ({method} {path}): no response at all"
    );
    assert!(
        !status.starts_with('5'),
        "request {i} ({method} {path}) with {} got {status}:\n{}",
        String::from_utf8_lossy(body)
            .chars()
            .take(800)
            .collect::<String>(),
        resp.chars().take(600).collect::<String>()
    );
    status
}

/// After a fuzz: the controller still serves, and a real job still runs (once what the
/// fuzz may have done to the node as root is undone).
fn still_works(c: &Cluster, addr: &str) {
    let r = http::request(addr, "POST", "/api/v1/nodes/n1/resume", "", b"");
    assert_eq!(http::status(&r), "200", "{r}");
    let done = c.script("done.sh", "#!/bin/sh\necho fuzz-survived\n");
    success_stdout(
        &c.cli("gsub", &["--wait", &done]),
        "gsub --wait after the fuzz",
    );
    let nodes = http::json_body(&http::request(addr, "GET", "/api/v1/nodes", "", b""));
    assert_eq!(nodes["nodes"][0]["name"], "n1");
}

#[test]
fn t10_no_http_request_breaks_the_controller() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let held = c.submit(&["--hold", &script]);
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    let mut spec = gsched_types::job::JobSpec::simple("fuzz", &me, "#!/bin/sh\ntrue\n");
    spec.hold = true;
    let spec = serde_json::to_value(&spec).unwrap();
    let action = json!({"action": "hold", "select": {"jobs": [{"id": held}]}});
    let (n, mut rng) = fuzz_run(0x5eed);
    let mut statuses = std::collections::BTreeMap::<String, u64>::new();
    for i in 0..n {
        let id = [
            held.to_string(),
            "0".into(),
            u64::MAX.to_string(),
            "120_3".into(),
            word(&mut rng),
        ][rng.gen_range(0..5)]
        .replace(['/', ' ', '?', '#'], "_");
        let verb = [
            "cancel", "hold", "release", "requeue", "drain", "resume", "explode",
        ][rng.gen_range(0..7)];
        let path = match rng.gen_range(0..12) {
            0 => "/".to_string(),
            1 => "/metrics".into(),
            2 => "/api/v1/jobs".into(),
            3 => format!(
                "/api/v1/jobs?user={}&state={}&all={}&detail={}&after={}",
                word(&mut rng)
                    .chars()
                    .take(40)
                    .collect::<String>()
                    .replace(['&', ' ', '#'], ""),
                ["PD,R", "X", "", "all"][rng.gen_range(0..4)],
                rng.gen_range(0..3),
                ["1", "true", "x"][rng.gen_range(0..3)],
                ["0", "-1", "abc", "18446744073709551616"][rng.gen_range(0..4)],
            ),
            4 => format!("/api/v1/jobs/{id}"),
            5 => format!("/api/v1/jobs/{id}/{verb}"),
            6 => "/api/v1/jobs/actions".into(),
            7 => "/api/v1/nodes".into(),
            8 => format!(
                "/api/v1/nodes/{}/{verb}",
                ["n1", "n9", &id][rng.gen_range(0..3)]
            ),
            9 => format!(
                "/api/v1/{}",
                word(&mut rng)
                    .chars()
                    .take(60)
                    .collect::<String>()
                    .replace([' ', '#', '?'], "")
            ),
            10 => "/api/v1/jobs/actions/extra/segments".into(),
            _ => "/%2e%2e/%2e%2e/etc/passwd".into(),
        };
        let method = ["GET", "POST", "POST", "PUT", "DELETE", "PATCH"][rng.gen_range(0..6)];
        let body: Vec<u8> = match rng.gen_range(0..8) {
            0 => Vec::new(),
            1 => {
                let mut v = spec.clone();
                mutate(&mut v, &mut rng);
                serde_json::to_vec(&v).unwrap()
            }
            2 => {
                let mut v = action.clone();
                mutate(&mut v, &mut rng);
                serde_json::to_vec(&v).unwrap()
            }
            3 => serde_json::to_vec(&junk_value(&mut rng, 0)).unwrap(),
            4 => (0..rng.gen_range(1..3_000_000))
                .map(|_| rng.r#gen())
                .collect(),
            5 => b"{\"reason\": \"fuzz\"}".to_vec(),
            6 => serde_json::to_vec(&spec).unwrap(),
            _ => b"{not json".to_vec(),
        };
        let mut headers = String::new();
        if rng.gen_bool(0.3) {
            headers += &format!(
                "Authorization: Bearer {}\r\n",
                ["gst1.0.0.99999999999999.00", "nonsense", "", "gst1.1.1.1"][rng.gen_range(0..4)]
            );
        }
        if rng.gen_bool(0.3) {
            let key: String = word(&mut rng)
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(300)
                .collect();
            headers += &format!("Idempotency-Key: {key}\r\n");
        }
        if rng.gen_bool(0.2) {
            headers += "X-Gsched-Munge: MUNGE:not-a-credential\r\n";
        }
        if rng.gen_bool(0.5) {
            headers += "Content-Type: application/json\r\n";
        }
        let status = fuzz_request(i, &addr, method, &path, &headers, &body);
        *statuses.entry(status).or_default() += 1;
    }
    eprintln!("http fuzz: {n} requests, statuses {statuses:?}");
    assert!(statuses.keys().any(|s| s.starts_with('2')), "{statuses:?}");
    assert!(statuses.keys().any(|s| s.starts_with('4')), "{statuses:?}");
    still_works(&c, &addr);
}

/// `schema` with a top-level `$ref` followed.
fn resolve<'a>(schema: &'a Value, doc: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => &doc["components"]["schemas"][r.rsplit('/').next().unwrap_or_default()],
        None => schema,
    }
}

/// A value for `schema` (an OpenAPI 3.0 schema of `doc`, `$ref`s resolved): mostly valid,
/// the depth bounded.
fn instance(schema: &Value, doc: &Value, rng: &mut SmallRng, depth: u32) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or_default();
        return instance(&doc["components"]["schemas"][name], doc, rng, depth + 1);
    }
    if schema["nullable"] == true && rng.gen_bool(0.2) {
        return Value::Null;
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema[key].as_array().filter(|o| !o.is_empty()) {
            let pick = &options[rng.gen_range(0..options.len())];
            return instance(pick, doc, rng, depth + 1);
        }
    }
    if let Some(all) = schema["allOf"].as_array() {
        let mut merged = serde_json::Map::new();
        for part in all {
            if let Value::Object(m) = instance(part, doc, rng, depth + 1) {
                merged.extend(m);
            }
        }
        return Value::Object(merged);
    }
    if let Some(options) = schema["enum"].as_array().filter(|o| !o.is_empty()) {
        return options[rng.gen_range(0..options.len())].clone();
    }
    if let Some(c) = schema.get("const") {
        return c.clone();
    }
    let kind = match &schema["type"] {
        Value::String(t) => t.clone(),
        Value::Array(ts) if !ts.is_empty() => ts[rng.gen_range(0..ts.len())]
            .as_str()
            .unwrap_or("null")
            .to_string(),
        _ if schema.get("properties").is_some() => "object".into(),
        _ => return junk_value(rng, 2),
    };
    match kind.as_str() {
        "object" => {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(|x| x.as_str()).collect())
                .unwrap_or_default();
            let mut out = serde_json::Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (k, s) in props {
                    if required.contains(&k.as_str()) || rng.gen_bool(0.5) {
                        out.insert(k.clone(), instance(s, doc, rng, depth + 1));
                    }
                }
            }
            Value::Object(out)
        }
        "array" => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| instance(&schema["items"], doc, rng, depth + 1))
                .collect(),
        ),
        "string" => json!(
            [
                "",
                "n1",
                "alice",
                "gpu",
                "00:10:00",
                "x".repeat(300).as_str(),
                "名前"
            ][rng.gen_range(0..7)]
        ),
        "integer" => {
            let min = schema["minimum"].as_i64().unwrap_or(0);
            json!(min + rng.gen_range(0..200))
        }
        "number" => json!(rng.gen_range(0.0..1000.0)),
        "boolean" => json!(rng.gen_bool(0.5)),
        _ => Value::Null,
    }
}

#[test]
fn t20_requests_made_from_the_openapi_document_get_no_server_errors() {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    let script = c.script("sleep.sh", "#!/bin/sh\nexec sleep 600\n");
    let held = c.submit(&["--hold", &script]);
    let resp = http::request(&addr, "GET", "/api/v1/openapi.json", "", b"");
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let doc: Value = serde_json::from_str(resp.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(doc["openapi"], "3.0.3");
    let mut operations: Vec<(String, String, Value)> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations.push((path.clone(), method.to_uppercase(), op.clone()));
        }
    }
    assert!(operations.len() >= 8, "{operations:?}");
    let (n, mut rng) = fuzz_run(0x0a91);
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .unwrap()
        .name;
    let mut statuses = std::collections::BTreeMap::<String, u64>::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..n {
        let (template, method, op) = &operations[rng.gen_range(0..operations.len())];
        let mut path = template.clone();
        let mut query = Vec::new();
        let mut headers = String::new();
        for p in op["parameters"].as_array().cloned().unwrap_or_default() {
            let name = p["name"].as_str().unwrap();
            let value = match name {
                "id" => [
                    held.to_string(),
                    "0".into(),
                    "120_3".into(),
                    u64::MAX.to_string(),
                    "abc".into(),
                ][rng.gen_range(0..5)]
                .clone(),
                "name" => ["n1", "n9", "名前"][rng.gen_range(0..3)].to_string(),
                _ => match instance(&p["schema"], &doc, &mut rng, 0) {
                    Value::String(s) => s,
                    other => other.to_string(),
                },
            };
            let value: String = value
                .chars()
                .filter(|c| !c.is_whitespace() && !"#?/&%".contains(*c))
                .collect();
            match p["in"].as_str() {
                Some("path") => path = path.replace(&format!("{{{name}}}"), &value),
                Some("query") if rng.gen_bool(0.6) => query.push(format!("{name}={value}")),
                Some("header") if rng.gen_bool(0.5) && value.is_ascii() && !value.is_empty() => {
                    headers += &format!("{name}: {value}\r\n")
                }
                _ => {}
            }
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let content = &op["requestBody"]["content"]["application/json"];
        let body = match content["schema"].as_object() {
            Some(_) => {
                // The document's example with one property generated from its schema,
                // or a whole instance of the schema; sometimes mangled further.
                let mut v = match content.get("example") {
                    Some(example) if rng.gen_bool(0.6) => {
                        let mut v = example.clone();
                        if v.get("user").is_some() {
                            v["user"] = json!(me);
                            v["workdir"] = json!(c.path("").to_string_lossy());
                            v["hold"] = json!(true);
                        }
                        let schema = resolve(&content["schema"], &doc);
                        if let (Some(props), Some(obj)) =
                            (schema["properties"].as_object(), v.as_object_mut())
                            && rng.gen_bool(0.7)
                        {
                            let (k, s) = props.iter().nth(rng.gen_range(0..props.len())).unwrap();
                            obj.insert(k.clone(), instance(s, &doc, &mut rng, 1));
                        }
                        v
                    }
                    _ => instance(&content["schema"], &doc, &mut rng, 0),
                };
                if rng.gen_bool(0.2) {
                    mutate(&mut v, &mut rng);
                }
                serde_json::to_vec(&v).unwrap()
            }
            None => Vec::new(),
        };
        headers += "Content-Type: application/json\r\n";
        let status = fuzz_request(i, &addr, method, &path, &headers, &body);
        seen.insert((template.clone(), method.clone(), status.clone()));
        *statuses.entry(status).or_default() += 1;
    }
    eprintln!(
        "schema fuzz: {n} requests over {} operations, statuses {statuses:?}",
        operations.len()
    );
    // Every operation was exercised, and some of each kind got through.
    for (template, method, _) in &operations {
        assert!(
            seen.iter().any(|(t, m, _)| t == template && m == method),
            "{method} {template} never tried"
        );
    }
    assert!(
        seen.iter()
            .any(|(t, m, s)| t == "/api/v1/jobs" && m == "POST" && s == "201"),
        "no generated job spec was accepted: {seen:?}"
    );
    still_works(&c, &addr);
}

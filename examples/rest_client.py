#!/usr/bin/env python3
"""A small client of gsched's REST API (`gctld --http`), driven by its OpenAPI document.

Standard library only. It reads /api/v1/openapi.json once and calls operations by the
document's paths and methods: a path, method or parameter the document does not declare is
refused before anything is sent, and a job spec is checked against the document's JobSpec
schema (required fields, no unknown ones), so the client follows the server it talks to.

    export GSCHED_URL=http://127.0.0.1:6820 GSCHED_TOKEN=$(gctl token | cut -d= -f2)
    python3 examples/rest_client.py submit --name demo --gpus 1 train.sh
    python3 examples/rest_client.py list --user "$USER"
    python3 examples/rest_client.py cancel 42

Without a token (a --dev-local cluster) the caller is whoever owns the connection.
"""

import argparse
import getpass
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


class ApiError(Exception):
    """The server refused a request; the message is its `error`."""

    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Client:
    def __init__(self, base_url, token=None):
        self.base = base_url.rstrip("/")
        self.token = token
        self.doc = self._send("GET", "/api/v1/openapi.json")

    def _send(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        # Writes without a token must say they come from a program, not a web page.
        headers["X-Gsched-Client"] = "rest_client.py"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            try:
                message = json.load(e).get("error", "")
            except ValueError:
                message = e.reason
            raise ApiError(e.code, message) from None

    def _schema(self, ref):
        name = ref.rsplit("/", 1)[-1]
        return self.doc["components"]["schemas"][name]

    def operation(self, method, template):
        """The document's operation for `method` on `template` (KeyError if undeclared)."""
        try:
            return self.doc["paths"][template][method.lower()]
        except KeyError:
            raise KeyError(f"the server's API has no {method} {template}") from None

    def call(self, method, template, path_params=None, query=None, body=None, key=None):
        op = self.operation(method, template)
        declared = {p["name"]: p for p in op.get("parameters", [])}
        path_params, query = path_params or {}, query or {}
        for name in list(path_params) + list(query):
            if name not in declared:
                raise KeyError(f"{method} {template} takes no parameter {name!r}")
        for name, p in declared.items():
            if p["in"] == "path" and name not in path_params:
                raise KeyError(f"{method} {template} needs {name!r}")
            allowed = p.get("schema", {}).get("enum")
            if p["in"] == "path" and allowed and path_params[name] not in allowed:
                raise ValueError(f"{name} must be one of {allowed}")
        path = template
        for name, value in path_params.items():
            path = path.replace("{" + name + "}", urllib.parse.quote(str(value), safe=""))
        if query:
            path += "?" + urllib.parse.urlencode(query)
        headers = {}
        if key is not None and "Idempotency-Key" in declared:
            headers["Idempotency-Key"] = key
        return self._send(method, path, body, headers)

    def check_spec(self, spec):
        """Refuses a spec the server's JobSpec schema would: missing or unknown fields."""
        op = self.operation("POST", "/api/v1/jobs")
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = self._schema(schema["$ref"])
        missing = [f for f in schema.get("required", []) if f not in spec]
        unknown = [f for f in spec if f not in schema.get("properties", {})]
        if missing or unknown:
            raise ValueError(f"job spec: missing {missing}, unknown {unknown}")

    def example_spec(self):
        """The document's example job spec: a starting point with every required field."""
        op = self.operation("POST", "/api/v1/jobs")
        return dict(op["requestBody"]["content"]["application/json"]["example"])

    def submit(self, spec, key=None):
        self.check_spec(spec)
        return self.call("POST", "/api/v1/jobs", body=spec, key=key)["job_ids"]

    def jobs(self, user=None, state=None, finished=False):
        query = {}
        if user:
            query["user"] = user
        if state:
            query["state"] = state
        if finished:
            query["all"] = "1"
        rows, after = [], None
        while True:
            page = self.call("GET", "/api/v1/jobs", query=dict(query, **({"after": after} if after else {})))
            rows.extend(page["jobs"])
            after = page.get("next_after")
            if not after:
                return rows

    def cancel(self, job_id, key=None):
        return self.call(
            "POST", "/api/v1/jobs/{id}/{action}", {"id": job_id, "action": "cancel"}, key=key
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("GSCHED_URL", "http://127.0.0.1:6820"))
    ap.add_argument("--token", default=os.environ.get("GSCHED_TOKEN"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="submit a script")
    s.add_argument("script")
    s.add_argument("--name")
    s.add_argument("--gpus", type=int, default=0, help="GPUs per node")
    s.add_argument("--nodes", type=int, default=1)
    s.add_argument("--hold", action="store_true")
    ls = sub.add_parser("list", help="list jobs as JSON rows")
    ls.add_argument("--user")
    ls.add_argument("--state")
    ls.add_argument("--all", action="store_true", help="finished jobs too")
    c = sub.add_parser("cancel", help="cancel a job")
    c.add_argument("job")
    args = ap.parse_args()
    try:
        client = Client(args.url, args.token)
        if args.cmd == "submit":
            spec = client.example_spec()
            with open(args.script) as f:
                spec["script"] = f.read()
            spec.update(
                name=args.name or os.path.basename(args.script),
                user=getpass.getuser(),
                workdir=os.getcwd(),
                submit_dir=os.getcwd(),
                gpus_per_node=args.gpus,
                nodes=args.nodes,
                hold=args.hold,
            )
            ids = client.submit(spec)
            print(" ".join(str(i) for i in ids))
        elif args.cmd == "list":
            for row in client.jobs(args.user, args.state, args.all):
                print(json.dumps(row))
        elif args.cmd == "cancel":
            summary = client.cancel(args.job)
            for e in summary.get("errors", []):
                print(f"rest_client.py: {e}", file=sys.stderr)
            if summary.get("errors"):
                return 1
            print(f"cancelled {summary['count']} job(s)")
    except (ApiError, KeyError, ValueError, OSError) as e:
        print(f"rest_client.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

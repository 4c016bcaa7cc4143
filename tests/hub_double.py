"""A loopback HTTP test double of the Hugging Face Hub endpoints that ``huggingface_hub`` calls to
create a repository, commit files (inline, base64: Xet and LFS are not offered) and download them.

It is a test double, not a Hub: one process, repositories in memory, only the calls that
pushing and ``from_pretrained`` make, every request checked for the expected token. Nothing
here talks to the internet; point ``HF_ENDPOINT`` at :attr:`HubDouble.endpoint`.
"""

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPO = r"(?P<repo>[^/]+/[^/]+)"


class HubDouble:
    def __init__(self, token: str):
        self.token = token
        self.repos = {}  # repo_id -> {"private": bool, "branches": {name: {path: bytes}}, "commits": [...]}
        self.requests = []  # (method, path, authorised)
        self.fail_commits = False  # a connection that drops mid-push
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo_id, branch="main"):
        return self.repos[repo_id]["branches"][branch]

    def revision(self, repo_id, revision):
        """A branch's files, by branch name or by the commit sha the Hub reported for it."""
        branches = self.repos[repo_id]["branches"]
        if revision in branches:
            return branches[revision]
        return next((files for files in branches.values() if _sha(files) == revision), {})

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body=b"", headers=None, head=False):
                if isinstance(body, (dict, list)):
                    body = json.dumps(body).encode()
                    headers = {"Content-Type": "application/json", **(headers or {})}
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _authorised(self):
                ok = self.headers.get("Authorization") == f"Bearer {double.token}"
                double.requests.append((self.command, self.path, ok))
                return ok

            def _body(self):
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_POST(self):
                body = self._body()
                if not self._authorised():
                    return self._send(401, {"error": "Invalid credentials in Authorization header"})
                if self.path == "/api/repos/create":
                    request = json.loads(body)
                    repo_id = f"{request['organization']}/{request['name']}"
                    if repo_id in double.repos:
                        return self._send(409, {"error": "You already created this model repo", "url": repo_id})
                    private = bool(request.get("private")) or request.get("visibility") == "private"
                    double.repos[repo_id] = {"private": private, "branches": {"main": {}},
                                             "commits": []}
                    return self._send(200, {"url": f"{double.endpoint}/{repo_id}", "name": repo_id})
                if self.path == "/api/validate-yaml":
                    errors = card_metadata_errors(json.loads(body)["content"])
                    return self._send(400 if errors else 200, {"errors": [{"message": e} for e in errors],
                                                               "warnings": []})
                match = re.fullmatch(rf"/api/models/{REPO}/branch/(?P<branch>[^/]+)", self.path)
                if match:
                    branches = double.repos[match["repo"]]["branches"]
                    if match["branch"] in branches:
                        return self._send(409, {"error": "Reference already exists"})
                    branches[match["branch"]] = dict(branches["main"])
                    return self._send(200, {})
                match = re.fullmatch(rf"/api/models/{REPO}/preupload/(?P<rev>[^/]+)", self.path)
                if match:  # every file inline in the commit: no LFS, no Xet
                    files = json.loads(body)["files"]
                    return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                       "shouldIgnore": False} for f in files]})
                match = re.fullmatch(rf"/api/models/{REPO}/commit/(?P<rev>[^/?]+)(\?create_pr=1)?", self.path)
                if match:
                    if double.fail_commits:
                        self.connection.close()  # the connection drops before an answer
                        return None
                    return self._commit(match["repo"], match["rev"], body, bool(match.group(3)))
                return self._send(404, {"error": f"not in the test double: POST {self.path}"})

            def _commit(self, repo_id, revision, body, create_pr):
                repo = double.repos.get(repo_id)
                if repo is None:
                    return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                branch = f"refs/pr/{len(repo['commits']) + 1}" if create_pr else revision
                files = dict(repo["branches"].get(revision, {}))
                for line in lines:
                    if line["key"] == "file":
                        files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
                    elif line["key"] in ("deletedFile", "deletedFolder"):
                        files.pop(line["value"]["path"], None)
                    elif line["key"] != "header":
                        return self._send(400, {"error": f"the test double takes inline files only: {line['key']}"})
                repo["branches"][branch] = files
                oid = hashlib.sha1(body).hexdigest()
                repo["commits"].append({"oid": oid, "branch": branch, "summary": lines[0]["value"]["summary"]})
                return self._send(200, {"commitUrl": f"{double.endpoint}/{repo_id}/commit/{oid}", "commitOid": oid,
                                        "pullRequestUrl": f"{double.endpoint}/{repo_id}/discussions/"
                                                          f"{len(repo['commits'])}" if create_pr else None})

            def do_HEAD(self):
                self._download(head=True)

            def do_GET(self):
                tree = re.fullmatch(rf"/api/models/{REPO}/tree/(?P<rev>[^/?]+)(/(?P<path>[^?]*))?(\?.*)?", self.path)
                if tree and self._authorised():
                    files = double.revision(tree["repo"], tree["rev"])
                    folder = (tree["path"] or "").strip("/")
                    prefix = f"{folder}/" if folder else ""
                    entries = [{"type": "file", "path": name, "size": len(content), "oid": _sha({name: content})}
                               for name, content in sorted(files.items())
                               if name.startswith(prefix) and "/" not in name[len(prefix):]]
                    if folder and not entries:
                        return self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
                    return self._send(200, entries)
                match = re.fullmatch(rf"/api/models/{REPO}(/revision/(?P<rev>[^/?]+))?(\?.*)?", self.path)
                if match and self._authorised():
                    repo = double.repos.get(match["repo"])
                    if repo is None:
                        return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                    files = double.revision(match["repo"], match["rev"] or "main")
                    return self._send(200, {"id": match["repo"], "sha": _sha(files), "private": repo["private"],
                                            "siblings": [{"rfilename": name} for name in sorted(files)]})
                self._download(head=False)

            def _download(self, head):
                match = re.fullmatch(rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>[^?]+)(\?.*)?", self.path)
                if not self._authorised():
                    return self._send(401, {"error": "Invalid credentials"}, head=head)
                if not match or match["repo"] not in double.repos:
                    return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"},
                                      head=head)
                files = double.revision(match["repo"], match["rev"])
                content = files.get(match["path"])
                if content is None:
                    return self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"},
                                      head=head)
                return self._send(200, content, {"X-Repo-Commit": _sha(files),
                                                 "ETag": f'"{hashlib.sha256(content).hexdigest()}"'}, head=head)

        return Handler


def _sha(files):
    return hashlib.sha1(json.dumps(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())).encode()
                        ).hexdigest()


def card_metadata_errors(readme: str) -> list[str]:
    """What the Hub's metadata check would object to, for the fields hf-plm-ext writes (a subset of its schema)."""
    import yaml

    match = re.match(r"^---\n(.*?)\n---\n", readme, re.S)
    if not match:
        return ["no YAML metadata block"]
    try:
        metadata = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as err:
        return [f"YAML does not parse: {err}"]
    errors = []
    for entry in metadata.get("model-index", []):
        if not entry.get("name"):
            errors.append("model-index entry without name")
        for result in entry.get("results", []):
            if not result.get("task", {}).get("type"):
                errors.append("model-index result without task.type")
            if not {"type", "name"} <= set(result.get("dataset", {})):
                errors.append("model-index result without dataset.type and dataset.name")
            for metric in result.get("metrics", []):
                if "type" not in metric or not isinstance(metric.get("value"), (int, float)):
                    errors.append(f"model-index metric without type or numeric value: {metric}")
    for key in ("tags", "datasets", "language"):
        if key in metadata and not isinstance(metadata[key], (list, str)):
            errors.append(f"{key} must be a list or a string")
    return errors

"""A Hugging Face Hub on loopback: dataset repos and storage buckets served from directories over plain HTTP/1.1, so
that hf:// reads (HfFileSystem, `hf_hub_download`, `snapshot_download`, `datasets.load_dataset`, LeRobot's loaders)
run offline against a real server. Point a client at it with HF_ENDPOINT=http://HOST:PORT (read by huggingface_hub at
import).

`<repos_dir>/<org>/<name>/` is the tree of dataset repo `org/name`. Every revision (main, v3.0, any tag or sha)
names that same tree; the repo's commit sha is a hash of `org/name`, so it stays the same while files change (a
client's cache keyed by that sha does not notice edits; give a changed dataset a new name). Branch `main` and, when
`meta/info.json` has one, a tag named after its `codebase_version` (what LeRobot looks for) are the repo's refs.
No Xet and no LFS: files are downloaded over plain HTTP with byte ranges. Only the read API is served:

    GET  /api/datasets/ORG/NAME[/revision/REV]          repo info: sha, siblings (with sizes for ?blobs=1)
    GET  /api/datasets/ORG/NAME/refs                    branches and tags
    GET  /api/datasets/ORG/NAME/tree/REV[/PATH]         ?recursive=&expand=, pages of 1000 (50 with expand)
    POST /api/datasets/ORG/NAME/paths-info/REV          form or JSON `paths` (missing paths left out)
    HEAD|GET /datasets/ORG/NAME/resolve/REV/PATH        the file; `Range: bytes=a-b` gives 206

`<buckets_dir>/<owner>/<name>/` is storage bucket `owner/name` (hf://buckets/owner/name/...), read as huggingface_hub
2.x reads buckets (`HfApi.bucket_info`, `list_bucket_tree`, `get_bucket_paths_info`, HfFileSystem). Its files have
no Xet hash (`xetHash: null`), so clients fetch them over HTTP. As on the Hub, `resolve` answers 302 to the storage
host, and the bytes come from there: here `/storage/buckets/...` on the host the client asked (the same metering and
shaping proxy as the API call), so every read costs the two round trips it costs in production:

    GET  /api/buckets/OWNER/NAME                        bucket info: id, size, totalFiles
    GET  /api/buckets/OWNER/NAME/tree[/PREFIX]          ?recursive= (files only, as the Hub), pages of 1000
    POST /api/buckets/OWNER/NAME/paths-info             JSON `paths` (files only; missing paths left out)
    HEAD|GET /buckets/OWNER/NAME/resolve/PATH           302 to /storage/buckets/OWNER/NAME/PATH
    HEAD|GET /storage/buckets/OWNER/NAME/PATH           the file; `Range: bytes=a-b` gives 206

    python -m dlbench.loopback hub --repos DIR [--buckets DIR] --host 127.0.0.1 --port 9780
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import re
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .server import LOOPBACK

PAGE, PAGE_EXPANDED = 1000, 50  # the Hub's page sizes for tree listings; huggingface_hub follows `Link: rel="next"`
DATE = datetime.datetime.fromtimestamp(0, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def repo_sha(repo_id: str) -> str:
    """The commit sha (40 hex digits) every revision of `repo_id` resolves to."""
    return hashlib.sha1(f"dlbench-loopback-hub:{repo_id}".encode()).hexdigest()


class _HubError(Exception):
    """An error answered as the Hub does: status, and the X-Error-Code huggingface_hub maps to an exception."""

    def __init__(self, status: int, code: str, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.commit = status, code, commit


class _Repo:
    """One repo directory: its entries as the Hub's JSON (files: `oid` a hash of path, size and mtime, which clients
    use only as a cache key; hashing the content would mean reading every file)."""

    def __init__(self, repo_id: str, root: Path):
        self.id, self.root, self.sha = repo_id, root, repo_sha(repo_id)

    def path(self, rel: str) -> Path:
        parts = Path(rel).parts
        if rel.startswith("/") or ".." in parts:  # nothing outside the repo (its files may be symlinks out of it)
            raise _HubError(404, "EntryNotFound", f"{rel}: not in {self.id}", self.sha)
        return self.root.joinpath(*parts)

    def entry(self, p: Path, expand: bool) -> dict:
        rel = p.relative_to(self.root).as_posix()
        st = p.stat()
        oid = hashlib.sha1(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
        out = {"type": "file", "oid": oid, "size": st.st_size, "path": rel}
        if p.is_dir():
            out.update(type="directory", size=0)
        if expand:
            out["lastCommit"] = {"id": self.sha, "title": "dlbench loopback hub", "date": DATE}
        return out

    def walk(self, rel: str, recursive: bool) -> Iterator[Path]:
        """The children of directory `rel` (all descendants if `recursive`), directories before files as the Hub."""
        d = self.path(rel)
        if not d.is_dir():
            raise _HubError(404, "EntryNotFound", f"{rel}: no such directory in {self.id}", self.sha)
        children = sorted(d.iterdir(), key=lambda c: (not c.is_dir(), c.name))
        yield from children
        if recursive:
            for c in children:
                if c.is_dir():
                    yield from self.walk(c.relative_to(self.root).as_posix(), True)

    def files(self) -> list[Path]:
        return [p for p in self.walk("", True) if p.is_file()]

    def refs(self) -> dict:
        ref = lambda name, kind: {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": self.sha}  # noqa: E731
        tags = []
        with contextlib.suppress(OSError, ValueError):
            if version := json.loads((self.root / "meta" / "info.json").read_text()).get("codebase_version"):
                tags.append(ref(version, "tags"))
        return {"branches": [ref("main", "heads")], "converts": [], "tags": tags, "pullRequests": []}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection per thread
    repos_dir: Path
    buckets_dir: Path | None = None
    quiet = True
    page_size: int | None = None

    def setup(self) -> None:
        super().setup()
        # headers and body leave in two writes: without TCP_NODELAY, Nagle holds the body for the client's delayed
        # ACK (40 ms a response), which no real Hub costs (their servers set it, as nginx does by default)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if not self.quiet:
            super().log_message(fmt, *args)

    # ------------------------------------------------------------------------------------------- plumbing
    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, ctype="application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, obj, headers: dict | None = None) -> None:
        self._send(200, json.dumps(obj).encode(), headers)

    def _repo(self, org: str, name: str) -> _Repo:
        root = self.repos_dir / org / name
        if not org or not name or ".." in (org, name) or not root.is_dir():
            raise _HubError(404, "RepoNotFound", f"Repository not found: {org}/{name}")
        return _Repo(f"{org}/{name}", root)

    def _bucket(self, owner: str, name: str) -> _Repo:
        root = self.buckets_dir / owner / name if self.buckets_dir else None
        if root is None or not owner or not name or ".." in (owner, name) or not root.is_dir():
            # the Hub's answer: RepoNotFound on a /api/buckets/ URL is what huggingface_hub calls BucketNotFoundError
            raise _HubError(404, "RepoNotFound", f"Bucket not found: {owner}/{name}")
        return _Repo(f"{owner}/{name}", root)

    def _host(self) -> str:
        return self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])

    def _dispatch(self) -> None:
        # read the body first: one left unread would be taken for the next request on this connection
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        seg = [unquote(s) for s in url.path.split("/")[1:]]  # split before unquoting: a revision may hold %2F
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if seg[:2] == ["api", "datasets"] and len(seg) >= 4:
                repo, rest = self._repo(seg[2], seg[3]), seg[4:]
                if self.command == "GET" and (not rest or rest[0] == "revision" and len(rest) == 2):
                    return self._info(repo, query)
                if self.command == "GET" and rest == ["refs"]:
                    return self._json(repo.refs())
                if self.command == "GET" and len(rest) >= 2 and rest[0] == "tree":
                    return self._tree(repo, "/".join(rest[2:]).strip("/"), query)
                if self.command == "POST" and len(rest) == 2 and rest[0] == "paths-info":
                    return self._paths_info(repo, body.decode())
            if seg[:1] == ["datasets"] and len(seg) >= 6 and seg[3] == "resolve" and self.command in ("GET", "HEAD"):
                return self._resolve(self._repo(seg[1], seg[2]), "/".join(seg[5:]))
            if seg[:2] == ["api", "buckets"] and len(seg) >= 4:
                bucket, rest = self._bucket(seg[2], seg[3]), seg[4:]
                if self.command == "GET" and not rest:
                    return self._bucket_info(bucket)
                if self.command == "GET" and rest[:1] == ["tree"]:
                    return self._bucket_tree(bucket, "/".join(rest[1:]).strip("/"), query)
                if self.command == "POST" and rest == ["paths-info"]:
                    return self._bucket_paths_info(bucket, body.decode())
            if seg[:1] == ["buckets"] and len(seg) >= 5 and seg[3] == "resolve" and self.command in ("GET", "HEAD"):
                bucket, rel = self._bucket(seg[1], seg[2]), "/".join(seg[4:])
                if not bucket.path(rel).is_file():
                    raise _HubError(404, "EntryNotFound", f"{rel}: no such file in bucket {bucket.id}")
                # the Hub sends bucket reads to its storage host; the client follows with the same Range
                location = f"http://{self._host()}/storage/buckets/{quote(bucket.id)}/{quote(rel)}"
                return self._send(302, b"", {"Location": location})
            if seg[:2] == ["storage", "buckets"] and len(seg) >= 5 and self.command in ("GET", "HEAD"):
                bucket, rel = self._bucket(seg[2], seg[3]), "/".join(seg[4:])
                p = bucket.path(rel)
                if not p.is_file():
                    raise _HubError(404, "EntryNotFound", f"{rel}: no such file in bucket {bucket.id}")
                return self._send_file(p, {"ETag": f'"{_bucket_entry(bucket, p)["oid"]}"'})
            raise _HubError(404, "", f"not served by the loopback hub: {self.command} {url.path}")
        except _HubError as e:
            headers = {"X-Error-Message": str(e)}
            if e.code:
                headers["X-Error-Code"] = e.code
            if e.commit:
                headers["X-Repo-Commit"] = e.commit  # lets hf_hub_download cache that the file does not exist
            self._send(e.status, json.dumps({"error": str(e)}).encode(), headers)

    do_GET = do_HEAD = do_POST = _dispatch

    # ------------------------------------------------------------------------------------------- endpoints
    def _info(self, repo: _Repo, query: dict) -> None:
        blobs = query.get("blobs", "").lower() in ("1", "true")
        siblings = [{"rfilename": p.relative_to(repo.root).as_posix()} for p in repo.files()]
        if blobs:
            for s in siblings:
                s["size"] = (repo.root / s["rfilename"]).stat().st_size
        self._json(
            {
                "_id": repo.sha[:24],
                "id": repo.id,
                "author": repo.id.split("/")[0],
                "sha": repo.sha,
                "private": False,
                "gated": False,
                "disabled": False,
                "lastModified": DATE,
                "createdAt": DATE,
                "tags": [],
                "siblings": siblings,
            }
        )

    def _tree(self, repo: _Repo, rel: str, query: dict) -> None:
        expand = query.get("expand", "").lower() in ("1", "true")
        recursive = query.get("recursive", "").lower() in ("1", "true")
        entries = [repo.entry(p, expand) for p in repo.walk(rel, recursive)]
        self._page(entries, query, self.page_size or (PAGE_EXPANDED if expand else PAGE))

    def _page(self, entries: list, query: dict, size: int) -> None:
        start = int(query.get("cursor", 0))
        headers = {}
        if start + size < len(entries):  # cursor pagination as the Hub's: the next page's URL in `Link`
            nxt = {**query, "cursor": str(start + size)}
            base = f"http://{self._host()}{urlsplit(self.path).path}"
            query_text = "&".join(f"{k}={quote(v, safe='')}" for k, v in nxt.items())
            headers["Link"] = f'<{base}?{query_text}>; rel="next"'
        self._json(entries[start : start + size], headers)

    def _paths_info(self, repo: _Repo, body: str) -> None:
        if self.headers.get("Content-Type", "").startswith("application/json"):
            form = json.loads(body or "{}")
            paths, expand = form.get("paths", []), bool(form.get("expand"))
        else:
            form = parse_qs(body)
            paths, expand = form.get("paths", []), form.get("expand", ["False"])[-1].lower() in ("1", "true")
        out = []
        for rel in paths:
            with contextlib.suppress(_HubError):
                if (p := repo.path(rel.strip("/"))).exists():
                    out.append(repo.entry(p, expand))
        self._json(out)

    def _bucket_info(self, bucket: _Repo) -> None:
        files = bucket.files()
        self._json(
            {
                "id": bucket.id,
                "private": False,
                "createdAt": DATE,
                "size": sum(p.stat().st_size for p in files),
                "totalFiles": len(files),
            }
        )

    def _bucket_tree(self, bucket: _Repo, prefix: str, query: dict) -> None:
        recursive = query.get("recursive", "").lower() in ("1", "true")
        p = bucket.path(prefix)
        if p.is_file():  # the Hub lists a file prefix as that file
            found = [p]
        elif p.is_dir():  # recursive: files only (clients rebuild the folders); else files and folders
            found = [c for c in bucket.walk(prefix, recursive) if not recursive or c.is_file()]
        else:
            found = []  # no match is an empty listing, not an error (the client decides)
        entries = [_bucket_entry(bucket, c) for c in found]
        for e in entries:
            e.pop("oid", None)
        self._page(entries, query, self.page_size or PAGE)

    def _bucket_paths_info(self, bucket: _Repo, body: str) -> None:
        out = []
        for rel in json.loads(body or "{}").get("paths", []):
            with contextlib.suppress(_HubError):
                if (p := bucket.path(rel.strip("/"))).is_file():
                    entry = _bucket_entry(bucket, p)
                    entry.pop("oid")
                    out.append(entry)
        self._json(out)

    def _resolve(self, repo: _Repo, rel: str) -> None:
        p = repo.path(rel)
        if not p.is_file():
            raise _HubError(404, "EntryNotFound", f"{rel}: no such file in {repo.id}", repo.sha)
        self._send_file(p, {"X-Repo-Commit": repo.sha, "ETag": f'"{repo.entry(p, False)["oid"]}"'})

    def _send_file(self, p: Path, headers: dict) -> None:
        """File `p` whole (200) or the `Range` asked (206; 416 if none of it exists)."""
        size = p.stat().st_size
        headers = {**headers, "Accept-Ranges": "bytes"}
        start, end, status = 0, size, 200
        if rng := self.headers.get("Range"):
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if m and m.group(1):
                start, end = int(m.group(1)), min(int(m.group(2)) + 1 if m.group(2) else size, size)
            elif m and m.group(2):  # a suffix: the last N bytes
                start = max(size - int(m.group(2)), 0)
            if not m or start >= size or start >= end:
                headers["Content-Range"] = f"bytes */{size}"
                return self._send(416, b"", headers)
            status, headers["Content-Range"] = 206, f"bytes {start}-{end - 1}/{size}"
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "GET":
            with open(p, "rb") as f:
                self.connection.sendfile(f, start, end - start)  # zero-copy; the socket is unbuffered


def _bucket_entry(bucket: _Repo, p: Path) -> dict:
    """A bucket entry as the Hub lists it: a file with its size, mtime and a null Xet hash (read over HTTP), or a
    directory. `oid` is kept for the ETag only."""
    rel, st = p.relative_to(bucket.root).as_posix(), p.stat()
    when = datetime.datetime.fromtimestamp(st.st_mtime, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if p.is_dir():
        return {"type": "directory", "path": rel, "uploadedAt": when}
    oid = hashlib.sha1(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
    return {
        "type": "file",
        "path": rel,
        "size": st.st_size,
        "xetHash": None,
        "mtime": when,
        "uploadedAt": when,
        "oid": oid,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a client holding a keep-alive connection open must not block shutdown

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client closing mid-file is no error
            super().handle_error(request, client_address)


def make_server(
    repos_dir: str | Path,
    host: str = LOOPBACK,
    port: int = 0,
    quiet: bool = True,
    page_size: int | None = None,
    buckets_dir: str | Path | None = None,
) -> ThreadingHTTPServer:
    """The server, bound but not yet serving (call `serve_forever`). `page_size`: tree entries per page (default:
    the Hub's 1000, 50 with expand=true); small values exercise the clients' pagination. `buckets_dir`: holds the
    storage buckets OWNER/NAME/ (None: no buckets)."""
    attrs = {
        "repos_dir": Path(repos_dir),
        "buckets_dir": Path(buckets_dir) if buckets_dir else None,
        "quiet": quiet,
        "page_size": page_size,
    }
    return _Server((host, port), type("Handler", (_Handler,), attrs))


@contextlib.contextmanager
def serve(
    repos_dir: str | Path,
    host: str = LOOPBACK,
    port: int = 0,
    quiet: bool = True,
    page_size: int | None = None,
    buckets_dir: str | Path | None = None,
) -> Iterator[str]:
    """Serve the repos under `repos_dir` from a background thread of this process for the `with` block; yields the
    endpoint URL (http://HOST:PORT) to give clients as HF_ENDPOINT. `port=0` picks a free port. Raises OSError if
    the port is taken; a missing `repos_dir` answers every request with RepoNotFound."""
    server = make_server(repos_dir, host, port, quiet, page_size, buckets_dir)
    thread = threading.Thread(target=server.serve_forever, name="loopback-hub", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run(repos_dir: str | Path, host: str = LOOPBACK, port: int = 0, buckets_dir: str | Path | None = None) -> None:
    """Serve in the foreground until interrupted, logging each request to stderr."""
    server = make_server(repos_dir, host, port, quiet=False, buckets_dir=buckets_dir)
    where = f"{Path(repos_dir).resolve()}" + (f" and buckets {Path(buckets_dir).resolve()}" if buckets_dir else "")
    print(f"loopback hub: http://{host}:{server.server_address[1]} serving {where}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()

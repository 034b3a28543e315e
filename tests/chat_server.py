"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1, for tests (stdlib only).

It answers ``POST /v1/chat/completions`` with the next scripted :class:`Scripted` reply (the
last one repeats) and keeps every request's JSON body and headers.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Scripted:
    """One reply: ``content`` as the assistant's message (status 200), or an error status."""

    content: str = ""
    status: int = 200
    delay: float = 0.0
    headers: dict = field(default_factory=dict)
    prompt_tokens: int = 100
    completion_tokens: int = 20


def completion(content: str, prompt_tokens: int, completion_tokens: int) -> dict:
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class ChatServer:
    """``with ChatServer([Scripted(...), ...]) as s: ... s.base_url ... s.requests``."""

    def __init__(self, replies: list[Scripted]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    self.send_error(404)
                    return
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    r = server.replies[min(len(server.requests), len(server.replies)) - 1]
                time.sleep(r.delay)
                if r.status == 200:
                    payload = json.dumps(completion(r.content, r.prompt_tokens, r.completion_tokens)).encode()
                else:
                    payload = json.dumps({"error": {"message": f"scripted {r.status}", "type": "test"}}).encode()
                try:
                    self.send_response(r.status)
                    for k, v in {"Content-Type": "application/json", **r.headers}.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def log_message(self, *args):  # keep test output clean
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""Real local receivers for alerts: an HTTP server capturing posted JSON and a minimal SMTP server
capturing mail, each on 127.0.0.1 in a thread."""
from __future__ import annotations

import email
import json
import queue
import socketserver
import threading
from email import policy as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HttpReceiver:
    """Answers every POST with `status` and keeps its JSON body."""

    def __init__(self, status: int = 200):
        self.posts: queue.Queue = queue.Queue()
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.posts.put({"path": self.path, "content_type": self.headers.get("Content-Type"),
                                    "json": json.loads(body)})
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/retrace"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, timeout: float = 10.0) -> dict:
        return self.posts.get(timeout=timeout)

    def drain(self) -> list[dict]:
        out = []
        while not self.posts.empty():
            out.append(self.posts.get_nowait())
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpReceiver:
    """Just enough SMTP (RFC 5321: EHLO/HELO, MAIL, RCPT, DATA, RSET, NOOP, QUIT) to take messages."""

    def __init__(self):
        self.messages: queue.Queue = queue.Queue()
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self):
                self.reply("220 localhost test SMTP")
                sender, recipients = None, []
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    command = line.decode().strip()
                    verb = command.split(" ", 1)[0].upper()
                    if verb in ("EHLO", "HELO"):
                        self.reply("250 localhost")
                    elif verb == "MAIL":
                        sender, recipients = command.split(":", 1)[1].strip(), []
                        self.reply("250 OK")
                    elif verb == "RCPT":
                        recipients.append(command.split(":", 1)[1].strip().strip("<>"))
                        self.reply("250 OK")
                    elif verb == "DATA":
                        self.reply("354 end data with <CR><LF>.<CR><LF>")
                        data = []
                        while (chunk := self.rfile.readline()) not in (b".\r\n", b".\n", b""):
                            data.append(chunk[1:] if chunk.startswith(b"..") else chunk)
                        message = email.message_from_bytes(b"".join(data), policy=email_policy.default)
                        receiver.messages.put({"from": sender, "to": recipients, "message": message})
                        self.reply("250 OK queued")
                    elif verb in ("RSET", "NOOP"):
                        self.reply("250 OK")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("502 command not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, timeout: float = 10.0) -> dict:
        return self.messages.get(timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
